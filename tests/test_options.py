import os
import re

import pytest

from pipelines.core import options
from pipelines.core import split_flags


def test_parse_splits_keeps_order_and_values():
    assert split_flags.parse_splits('train=0.8,val=0.1,test=0.1') == (
        ('train', 0.8),
        ('val', 0.1),
        ('test', 0.1),
    )


@pytest.mark.parametrize(
    'text, message',
    [
        ('train=0.8,val=0.1', 'sum to 0.9'),
        ('train=0.5,train=0.5', 'appears twice'),
        ('train', 'expected name=fraction'),
        ('train=x', 'not a number'),
        ('tr/ain=1', 'expected name=fraction'),
        ('train=1.5,val=-0.5', r'outside \[0, 1\]'),
    ],
)
def test_parse_splits_rejects_bad_specs(text, message):
    with pytest.raises(ValueError, match=message):
        split_flags.parse_splits(text)


def test_unknown_flags_go_to_beam():
    config, beam_args = options.parse_build_args(
        [
            '--input',
            'in',
            '--output',
            'out',
            '--runner',
            'DirectRunner',
            '--direct_num_workers=2',
            '--num-shards',
            '3',
        ]
    )
    assert (config.input, config.output, config.num_shards) == ('in', 'out', 3)
    assert beam_args == ['--runner', 'DirectRunner', '--direct_num_workers=2']


def test_config_file_gives_defaults_and_command_line_wins(tmp_path):
    config_file = tmp_path / 'build.yaml'
    config_file.write_text(
        'input: from_yaml\noutput: out\nseed: 7\nsplits: {train: 0.5, val: 0.5}\n'
        'beam:\n  runner: DirectRunner\n  direct_num_workers: 1\n'
    )
    config, beam_args = options.parse_build_args(
        ['--config', str(config_file), '--seed', '9', '--direct_num_workers=2']
    )
    assert config.input == 'from_yaml'
    assert config.seed == 9
    assert config.splits == (('train', 0.5), ('val', 0.5))
    # Beam parses left to right: the command line's value comes last and wins.
    assert beam_args == [
        '--runner=DirectRunner',
        '--direct_num_workers=1',
        '--direct_num_workers=2',
    ]


def test_config_file_with_unknown_key_is_refused(tmp_path):
    config_file = tmp_path / 'build.yaml'
    config_file.write_text('input: a\noutput: b\nshards: 3\n')
    with pytest.raises(ValueError, match=r"unknown keys \['shards'\]"):
        options.parse_build_args(['--config', str(config_file)])


def test_input_and_output_are_required():
    with pytest.raises(SystemExit):
        options.parse_build_args(['--input', 'x'])


def test_io_threads_default_to_one_locally_and_many_for_remote_inputs():
    local, _ = options.parse_build_args(['--input', 'data', '--output', 'out'])
    remote, _ = options.parse_build_args(['--input', 'gs://b/data', '--output', 'out'])
    chosen, _ = options.parse_build_args(
        ['--input', 'gs://b/data', '--output', 'o', '--io-threads', '7']
    )
    assert (local.threads, remote.threads, chosen.threads) == (1, 32, 7)


@pytest.mark.parametrize('name', ['build_local.yaml', 'build_smoke.yaml'])
def test_shipped_build_configs_parse(name):
    path = os.path.join(os.path.dirname(__file__), '..', 'configs', name)
    config, beam_args = options.parse_build_args(
        ['--config', path, '--input', 'i', '--output', 'o']
    )
    assert sum(fraction for _, fraction in config.splits) == pytest.approx(1.0)
    assert '--runner=DirectRunner' in beam_args


def test_allow_root_repeats_and_adds_to_the_config_file(tmp_path):
    config_file = tmp_path / 'build.yaml'
    config_file.write_text('input: m.csv\noutput: out\nallow_roots: gs://b/shared\n')
    config, _ = options.parse_build_args(
        ['--config', str(config_file), '--allow-root', '/data/a', '--allow-root=/data/b']
    )
    assert config.inputs.allow_roots == ('gs://b/shared', '/data/a', '/data/b')
    assert not config.inputs.follow_symlinks
    plain, _ = options.parse_build_args(['--input', 'i', '--output', 'o', '--follow-symlinks'])
    assert (plain.inputs.allow_roots, plain.inputs.follow_symlinks) == ((), True)


@pytest.mark.parametrize(
    'argv, message',
    [
        (['--num_shards', '4'], 'unknown flag --num_shards: did you mean --num-shards?'),
        (['--shard_size_mb=64'], 'unknown flag --shard_size_mb: did you mean --shard-size-mb?'),
        (['--runer', 'DirectRunner'], 'unknown flag --runer: did you mean --runner?'),
        (['stray'], "unexpected argument 'stray'"),
    ],
)
def test_flags_neither_ours_nor_beams_are_refused_with_the_closest(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        options.parse_build_args(['--input', 'in', '--output', 'out', *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_beam_options_in_the_config_file_are_checked_too(tmp_path, capsys):
    config_file = tmp_path / 'build.yaml'
    config_file.write_text('input: a\noutput: b\nbeam:\n  direct_num_workrs: 2\n')
    with pytest.raises(SystemExit):
        options.parse_build_args(['--config', str(config_file)])
    assert 'did you mean --direct_num_workers?' in capsys.readouterr().err


def test_a_bad_value_says_what_is_wrong_on_the_command_line_and_in_the_config(tmp_path, capsys):
    with pytest.raises(SystemExit):
        options.parse_build_args(['--input', 'a', '--output', 'b', '--splits', 'train=0.7,val=0.2'])
    err = capsys.readouterr().err
    assert 'argument --splits: fractions sum to 0.9, not 1' in err
    assert 'invalid' not in err
    config_file = tmp_path / 'build.yaml'
    for text, message in [
        ('splits: train=0.7,val=0.2', 'splits: fractions sum to 0.9, not 1'),
        ('num_shards: 0', 'num_shards: must be 1 or more, got 0'),
        ('seed: many', "seed: expected a whole number, got 'many'"),
        ('format: jpeg', "format: 'jpeg' is not one of examples, paths"),
        ('num_shard: 3', "unknown keys ['num_shard'] (did you mean num_shards?)"),
    ]:
        config_file.write_text(f'input: a\noutput: b\n{text}\n')
        with pytest.raises(ValueError, match=re.escape(f'{config_file}: {message}')):
            options.parse_build_args(['--config', str(config_file)])
