"""A peer build: Hugging Face `datasets` imagefolder, shuffled and saved to disk in shards.

What a `datasets` user writes for a folder of labeled images: `load_dataset('imagefolder')`
(labels from folder names), `shuffle(seed)` and `save_to_disk` with a fixed shard count and one
process per core. The cache lives in a fresh folder under OUT, so every run starts cold, as a
first build does. With `--parquet` the shuffled dataset is written as Parquet files instead,
one per shard, with `Dataset.to_parquet` (what `push_to_hub` uploads; the Image column's bytes
embedded).

    python -m bench.peer_hf ROOT OUT [--num-shards 16] [--num-proc 2] [--parquet]
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
    parser.add_argument('--parquet', action='store_true', help='Parquet files, not save_to_disk')
    args = parser.parse_args(argv)
    dataset = datasets.load_dataset(
        'imagefolder',
        data_dir=args.root,
        split='train',
        cache_dir=os.path.join(args.out, 'cache'),
        num_proc=args.num_proc,
    )
    dataset = dataset.shuffle(seed=args.seed)
    if args.parquet:
        folder = os.path.join(args.out, 'parquet')
        os.makedirs(folder, exist_ok=True)
        for index in range(args.num_shards):
            shard = dataset.shard(args.num_shards, index, contiguous=True)
            shard.to_parquet(
                os.path.join(folder, f'train-{index:05d}-of-{args.num_shards:05d}.parquet')
            )
    else:
        dataset.save_to_disk(
            os.path.join(args.out, 'dataset'), num_shards=args.num_shards, num_proc=args.num_proc
        )
    print(f'wrote {len(dataset)} records')


if __name__ == '__main__':
    main()
