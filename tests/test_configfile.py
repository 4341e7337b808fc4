"""--config files, local and on gs:// (against the GCS emulator), for build and training flags."""

import pytest

from imageshards import configfile
from pipelines.core.options import parse_build_args
from trainer.config import parse_train_args

pytest_plugins = ['gcs_emulator']

_BUILD_YAML = b"""
input: gs://somewhere/images
output: gs://somewhere/shards
splits: {train: 0.75, val: 0.25}
shard-size-mb: 64
beam:
  runner: DataflowRunner
  max_num_workers: 7
"""


def test_a_gs_config_gives_the_build_its_defaults_and_beam_options(gcs):
    uri = gcs.upload('configs/build.yaml', _BUILD_YAML)
    config, beam_args = parse_build_args(['--config', uri, '--seed', '3'])
    assert config.input == 'gs://somewhere/images'
    assert config.splits == (('train', 0.75), ('val', 0.25))
    assert config.shard_size_mb == 64
    assert config.seed == 3
    assert '--runner=DataflowRunner' in beam_args and '--max_num_workers=7' in beam_args


def test_a_gs_config_gives_training_its_defaults_and_the_command_line_wins(gcs, tmp_path):
    uri = gcs.upload('configs/train.yaml', b'data: /data/shards\nbatch_size: 48\nepochs: 5\n')
    args = parse_train_args(['--config', uri, '--epochs', '2', '--job-dir', str(tmp_path)])
    assert (args.data, args.batch_size, args.epochs) == ('/data/shards', 48, 2)


def test_a_local_and_a_gs_config_load_the_same(gcs, tmp_path):
    local = tmp_path / 'same.yaml'
    local.write_bytes(_BUILD_YAML)
    assert configfile.load(gcs.upload('configs/same.yaml', _BUILD_YAML)) == configfile.load(
        str(local)
    )


def test_a_missing_gs_config_names_the_object(gcs):
    with pytest.raises(ValueError, match='configs/absent.yaml does not exist'):
        configfile.load(gcs.uri('configs', 'absent.yaml'))


def test_a_config_that_is_not_a_mapping_is_refused(tmp_path):
    path = tmp_path / 'list.yaml'
    path.write_text('- a\n- b\n', encoding='utf-8')
    with pytest.raises(ValueError, match='expected a mapping'):
        parse_build_args(['--config', str(path)])
