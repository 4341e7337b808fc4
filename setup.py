"""imageshards: globally shuffled, balanced TFRecord shards from labeled images, and a trainer.

This file is also what Dataflow stages to its workers (`--setup_file ./setup.py`).
"""

import re

import setuptools

with open('imageshards/__init__.py', encoding='utf-8') as f:
    VERSION = re.search(r"__version__ = '([^']+)'", f.read()).group(1)

REQUIRED = [
    'apache-beam[gcp]>=2.77,<3',
    'tensorflow>=2.21,<2.22',
    'tensorboard>=2.19',  # tf.summary (Keras' TensorBoard callback) needs it since TF 2.20
    'tensorflow-transform>=1.21,<1.22',
    # A build is also a TFDS dataset (imageshards/tfds_metadata.py writes its metadata).
    'tensorflow-datasets>=4.9.10,<5',
    'pillow>=10.4',
    'google-cloud-storage>=2.18,<4',
    # imageshards submit-training (trainer/submit.py); apache-beam[gcp] brings it too.
    'google-cloud-aiplatform>=1.60,<2',
    'google-crc32c>=1.5',
    'numpy>=1.26',
    # trainer/warm_start.py reads Keras' HDF5 weight files (--init-from x.h5); Keras needs it too.
    'h5py>=3.10',
    'pyyaml>=6',
    'rich>=13',  # progress displays (imageshards/progress.py)
    'matplotlib>=3.8,<4',  # imageshards report and preview (figures, Agg backend)
    # Detection and segmentation sets (pipelines/inputs/coco.py, voc.py, yolo.py): a COCO file
    # streamed, never loaded whole; masks made by the COCO reference implementation; VOC XML
    # read without entity expansion.
    'ijson>=3.3',
    'pycocotools>=2.0.8',
    'defusedxml>=0.7',
    # The trainer's semantic segmenter `--model deeplabv3_plus` (trainer/deeplab.py) is
    # KerasHub's DeepLabV3+; imported only by that model. It brings tensorflow-text of the
    # TensorFlow above.
    'keras-hub>=0.32,<0.33',
]

# What bench/ needs beside the package: the peers it measures imageshards against (TFDS's
# GeneratorBasedBuilder needs importlib_resources, Hugging Face datasets, the multi-label
# splitter), the measuring.
BENCH = [
    'datasets>=5,<6',
    # Grain reads ArrayRecord builds (bench/epoch_shuffle.py measures it against the trainer's
    # per-epoch shuffle; tests/test_random_access.py reads a build with it). Not the trainer's.
    'grain>=0.2',
    # bench/near_duplicate_crops.py: imagehash's phash as a peer, and scikit-image's shipped
    # photographs as held-out images (bench/crop_data.py)
    'ImageHash>=4.3',
    'importlib_resources>=6',
    'iterative-stratification>=0.1.9',  # bench/multilabel_split.py's in-memory peer
    'psutil>=5.9',
    'scikit-image>=0.22',
    'scikit-learn>=1.4',
]
EXTRAS = {
    'samples': ['scikit-learn>=1.4'],
    'bench': BENCH,
    # NVIDIA DALI (its CPU pipeline runs without a GPU), a reader bench/peer_reads.py measures
    # make_dataset against on the same shards. About 1 GB installed: only here and in `test`.
    'dali': ['nvidia-dali-cuda120>=1.40'],
    # The PyTorch `tfrecord` package: its readers take a build's index files (random access,
    # a part of each shard per DataLoader worker, shuffling). Its torch.utils.data datasets
    # need torch, which a PyTorch user has; its loaders (and the tests) do not.
    'pytorch': ['tfrecord>=1.14'],
    # The manual as a site (mkdocs.yml; CI runs `mkdocs build --strict`): File.generated and
    # anchor checks need MkDocs 1.6; pymdown-extensions' snippets include README.md's first
    # commands and bench/RESULTS.md, its highlighting and fences serve the theme.
    'docs': ['mkdocs>=1.6,<2', 'mkdocs-material>=9.5,<10', 'pymdown-extensions>=10.0'],
    'test': [
        *BENCH,  # tests/test_peer_builds.py runs the peers' builds that the benchmarks compare
        # tests/test_index_files.py reads a build with each through its index files.
        'nvidia-dali-cuda120>=1.40',
        'tfrecord>=1.14',
        'pytest>=8',
        'gcp-storage-emulator>=2024.8',
        'ruff>=0.6',
        'jinja2>=3.1',  # tfds.as_dataframe styles its table with pandas, which needs it
    ],
}

setuptools.setup(
    name='imageshards',
    version=VERSION,
    description='Globally shuffled, balanced TFRecord shards from labeled images with Apache '
    'Beam, and an interleaved tf.data trainer for GPUs and Vertex AI.',
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    python_requires='>=3.10,<3.13',
    packages=[
        *setuptools.find_packages(
            include=[
                'imageshards',
                'imageshards.*',
                'imageshards_cli',
                'imageshards_cli.*',
                'pipelines',
                'pipelines.*',
                'trainer',
                'trainer.*',
            ]
        ),
        'imageshards.configs',
    ],
    # The default configs travel with the package: configs/ (the folder users read, the one
    # copy in the repository) is installed as imageshards/configs/ (imageshards/distribution.py).
    package_dir={'imageshards.configs': 'configs'},
    package_data={
        'imageshards.configs': ['*.yaml'],
        # The tf.Transform graph of the default kind (pipelines/analysis/graph_cache.py).
        'pipelines.analysis': [f'transform_graphs/*/graph/{"*/" * depth}*' for depth in range(4)],
    },
    install_requires=REQUIRED,
    extras_require=EXTRAS,
    entry_points={'console_scripts': ['imageshards=imageshards_cli.main:main']},
)
