"""imageshards: globally shuffled, balanced TFRecord shards from labeled images.

The foundation, which imports no other folder of this project: the output contract, records,
files and what every command shares. The build is in pipelines/, the trainer in trainer/, the
commands in imageshards_cli/. Two folders below the rest, which import nothing of it:

    kinds/               what a build's records hold: the feature keys, a kind's schema, values,
                         parse spec and TFDS features (classification; new kinds: one module),
                         and records serialized as TensorFlow does, without it
    shard_formats/       the files shards are written in and read from (TFRecord, ArrayRecord,
                         Parquet; new formats: one module)

    layout.py            every file and folder of an output: its name, and which are ours
    dataset_json.py      dataset.json read, and a build as readers see it (`Build`)
    dataset_facts.py     dataset.json made from a build's facts, and checked
    object_facts.py      a detection build's accounting of its annotations, in dataset.json
    records.py           the records of a build, or of any TFRecord file, read
    tfds_metadata.py     a build as a TensorFlow Datasets dataset
    tft_preprocessing.py  the tf.Transform preprocessing_fn of a build (TensorFlow)
    tft_assets.py        what in a build's tf.Transform graph depends on its data
    decode.py            an encoded image decoded to the pixels Pillow shows (TensorFlow)
    stratification.py    how evenly the labels of a multi-label build spread over its parts
    grouping_facts.py    dataset.json's `grouping`: groups and clusters per split, their leaks
    storage.py           files local and on gs://: join, list, read, write, delete
    local_reads.py       local inputs asked of the kernel ahead of their reads, opened once
    folder_top.py        what is at the top of a folder, without listing below it
    gcs.py               Cloud Storage clients, retries, and a network fault told from an answer
    gcs_objects.py       objects on gs:// in as few requests as Cloud Storage allows
    file_names.py        file names as bytes, kept and written to JSON
    output_lock.py       one build per output: the lock a build holds on its output
    gcs_lock.py          the lock of a gs:// output
    lock_holder.py       who holds an output's lock, in words
    output_errors.py     a full disk, a read-only or missing output: one line each
    lifeline.py          a build lives and dies with its command
    supervise.py         Ctrl-C for a command with worker processes: one line, nothing left
    configfile.py        YAML files as defaults for a command's flags
    flags.py             strict flags, errors in words, defaults shown
    console.py           logging and words for the terminal
    progress.py          one progress display per command
    pool.py              work on a thread pool in order, with bounded memory
    distribution.py      this package as Vertex AI and Dataflow install it, its configs
"""

__version__ = '0.1.0'
