"""A peer build: Hugging Face `datasets` imagefolder, shuffled and saved to disk in shards.

What a `datasets` user writes for a folder of labeled images: `load_dataset('imagefolder')`
(labels from folder names), `shuffle(seed)` and `save_to_disk` with a fixed shard count and one
process per core. The cache lives in a fresh folder under OUT, so every run starts cold, as a
first build does.

    python -m bench.peer_hf ROOT OUT [--num-shards 16] [--num-proc 2]
"""

import argparse
import os

import datasets


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('root')
    parser.add_argument('out')
    parser.add_argument('--num-shards', type=int, default=16)
    parser.add_argument('--num-proc', type=int, default=os.cpu_count())
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    dataset = datasets.load_dataset(
        'imagefolder',
        data_dir=args.root,
        split='train',
        cache_dir=os.path.join(args.out, 'cache'),
        num_proc=args.num_proc,
    )
    dataset = dataset.shuffle(seed=args.seed)
    dataset.save_to_disk(
        os.path.join(args.out, 'dataset'), num_shards=args.num_shards, num_proc=args.num_proc
    )
    print(f'wrote {len(dataset)} records')


if __name__ == '__main__':
    main()
