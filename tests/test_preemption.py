"""Preemption: SIGTERM at some step, a rerun, and the same model as an uninterrupted run."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from trainer import train as train_lib

FLAGS = [
    '--image-size',
    '16',
    '--batch-size',
    '8',
    '--epochs',
    '3',
    '--crop-area',
    '0.5,1',
    '--augment',
    'standard',
    '--checkpoint-every',
    '1000',
    '--val-split',
    'none',
]


def _task(data, job_dir):
    env = dict(os.environ, TF_DETERMINISTIC_OPS='1', PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen(
        [
            sys.executable,
            '-m',
            'trainer.task',
            '--data',
            str(data),
            '--job-dir',
            str(job_dir),
            *FLAGS,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _weights(tf, job_dir):
    """Every saved variable of the newest checkpoint, and the optimizer's step."""
    reader = tf.train.load_checkpoint(str(job_dir / 'checkpoints'))
    names = [
        n
        for n in reader.get_variable_to_shape_map()
        if n.endswith('VARIABLE_VALUE') and not n.startswith('save_counter')
    ]
    values = {name: reader.get_tensor(name) for name in sorted(names)}
    return values, int(values['optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE'])


@pytest.mark.slow
def test_sigterm_then_rerun_trains_the_model_an_uninterrupted_run_trains(
    tf, color_builds, tmp_path
):
    data = color_builds['examples']
    whole = _task(data, tmp_path / 'whole')
    assert whole.wait(timeout=600) == 0, whole.stdout.read()
    interrupted = _task(data, tmp_path / 'cut')
    events = tmp_path / 'cut' / 'logs' / 'train'
    deadline = time.monotonic() + 300
    while not (events.exists() and any(events.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # some steps into the first epoch
    interrupted.send_signal(signal.SIGTERM)
    output = interrupted.stdout.read()
    assert interrupted.wait(timeout=300) == train_lib.PREEMPTED_EXIT_CODE, output
    _, stopped_at = _weights(tf, tmp_path / 'cut')
    whole_weights, total = _weights(tf, tmp_path / 'whole')
    assert 0 < stopped_at < total
    resumed = _task(data, tmp_path / 'cut')
    resumed_output = resumed.stdout.read()
    assert resumed.wait(timeout=600) == 0, resumed_output
    assert f'step {stopped_at % (total // 3)}' in resumed_output  # resumed mid-epoch
    cut_weights, cut_total = _weights(tf, tmp_path / 'cut')
    assert cut_total == total
    assert cut_weights.keys() == whole_weights.keys()
    for name, value in whole_weights.items():
        np.testing.assert_allclose(cut_weights[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
