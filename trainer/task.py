"""Entry point of training, locally and on Vertex AI: `python -m trainer.task --data OUT ...`.

Flags and configuration are in trainer/config.py, the work in trainer/train.py.
"""

import logging
import sys

from imageshards import console

_LOG = logging.getLogger('trainer.task')


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Before TensorFlow is imported: its start-up lines are gone unless --verbose.
    console.configure_logging(verbose='--verbose' in argv)
    from trainer import config as config_lib  # pylint: disable=import-outside-toplevel

    try:
        config = config_lib.parse_train_args(argv)
    except ValueError as e:  # a wrong --config file (the command line's errors exit in argparse)
        _LOG.error('%s', e)
        return 2
    from trainer import corrupt_shards  # pylint: disable=import-outside-toplevel
    from trainer import train  # pylint: disable=import-outside-toplevel

    try:
        metrics = train.train(config)
    except (ValueError, FileNotFoundError, corrupt_shards.CorruptShardError) as e:
        _LOG.error('%s', e)
        return 2
    except KeyboardInterrupt:
        print(
            f'interrupted: the checkpoints in {config.resolved_checkpoint_dir} are kept; rerun '
            f'the same command to resume from the last one',
            file=sys.stderr,
        )
        return console.INTERRUPTED_EXIT_CODE
    if metrics.get('preempted'):
        _LOG.warning('stopped at step %d on SIGTERM; rerun to resume', metrics['steps'])
        return train.PREEMPTED_EXIT_CODE
    _LOG.info('final metrics: %s', metrics)  # every worker's (only the chief writes the file)
    print(summary(metrics, config.job_dir))
    return 0


SUMMARY_METRICS = (
    'accuracy',
    'val_accuracy',
    'test_accuracy',
    'val_micro_f1',
    'val_macro_f1',
    'test_micro_f1_at_thresholds',
    'test_macro_f1_at_thresholds',
    'val_map_50',
    'test_map',
    'test_map_50',
    'test_mask_map',
    'test_mask_map_50',
    'val_mean_iou',
    'test_mean_iou',
)


def summary(metrics, job_dir) -> str:
    """The line a run ends with: epochs, time, the epoch kept and the accuracies it reached."""
    shown = [f'{key} {metrics[key]:.4f}' for key in SUMMARY_METRICS if key in metrics]
    seconds = metrics.get('train_seconds')
    took = f' in {console.duration(seconds)}' if seconds is not None else ''
    kept = ''
    if 'best_epoch' in metrics:
        kept = f'; kept epoch {metrics["best_epoch"]} ({metrics["selected_by"]})'
    return (
        f'trained {console.plural(metrics["epochs"], "epoch")} of {metrics["model"]}{took}'
        f'{kept}: {", ".join(shown) or "no accuracy measured"} '
        f'(all metrics: {job_dir}/metrics.json)'
    )


if __name__ == '__main__':
    sys.exit(main())
