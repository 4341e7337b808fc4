"""Entry point of training, locally and on Vertex AI: `python -m trainer.task --data OUT ...`.

Flags and configuration are in trainer/config.py, the work in trainer/train.py.
"""

import logging
import os
import sys


def main(argv=None):
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(levelname)s %(message)s')
    # TensorFlow's own INFO lines (one per checkpoint shard written, ...) drown the run's.
    logging.getLogger('tensorflow').setLevel(logging.WARNING)
    from trainer import config as config_lib  # pylint: disable=import-outside-toplevel
    from trainer import input as input_lib  # pylint: disable=import-outside-toplevel
    from trainer import train  # pylint: disable=import-outside-toplevel

    config = config_lib.parse_train_args(sys.argv[1:] if argv is None else argv)
    try:
        metrics = train.train(config)
    except (ValueError, FileNotFoundError, input_lib.CorruptShardError) as e:
        logging.error('%s', e)
        return 2
    if metrics.get('preempted'):
        logging.warning('stopped at step %d on SIGTERM; rerun to resume', metrics['steps'])
        return train.PREEMPTED_EXIT_CODE
    logging.info('final metrics: %s', metrics)
    return 0


if __name__ == '__main__':
    sys.exit(main())
