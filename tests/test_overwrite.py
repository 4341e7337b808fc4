"""--overwrite replaces an earlier build and what the imageshards tools wrote into it, and nothing
of anyone else's; `verify` names every file in a build that is not part of it."""

from imageshards_cli import main as cli
from imageshards_cli import verify
from pipelines import launcher

import images_for_tests as imgs

LOCAL = ('--direct_running_mode=in_memory', '--seed', '2')
# Not ours: a user's files beside, and inside, the folders a build and its tools write.
USER_FILES = ('keep.txt', 'report/notes.txt', 'train/mine.txt')


def _files(out):
    return sorted(str(p.relative_to(out)) for p in out.rglob('*') if p.is_file())


def _folders(out):
    return sorted(str(p.relative_to(out)) for p in out.rglob('*') if p.is_dir())


def _verify(out, capsys):
    status = verify.main([str(out)])
    return status, capsys.readouterr().out


def _unknown(output):
    marker = ': unknown file:'
    return sorted(line.split(marker)[0] for line in output.splitlines() if marker in line)


def test_overwrite_removes_every_file_of_the_earlier_build_and_its_tools(tmp_path, capsys):
    root, out = tmp_path / 'in', tmp_path / 'out'
    imgs.write_tree(root, 8, ('a', 'b'))
    (root / 'a' / 'rotated.jpg').write_bytes(imgs.exif_rotated_jpeg(3))  # re-encoded/ in paths
    first = ['--input', str(root), '--output', str(out), *LOCAL, '--format', 'paths']
    launcher.run([*first, '--splits', 'train=0.5,val=0.25,test=0.25', '--num-shards', '2'])
    assert (out / 'transform_fn').is_dir() and (out / 'reencoded').is_dir()
    assert cli.main(['report', str(out), '--epochs', '1', '--batch-size', '4']) == 0
    assert cli.main(['preview', str(out), '--image-size', '16']) == 0
    assert (out / 'preview.png').exists() and (out / 'report' / 'report.md').exists()
    status, output = _verify(out, capsys)
    assert status == 0, output  # the tools' outputs belong to the build
    # What an unfinished build leaves, and the user's own files.
    (out / 'val' / 'val-00007-of-00009.tfrecord').write_bytes(b'records of another build')
    (out / 'dataset.json.tmp').write_text('{}')
    for name in USER_FILES:
        (out / name).write_text('mine')
    status, output = _verify(out, capsys)
    expected = ['dataset.json.tmp', *USER_FILES, 'val/val-00007-of-00009.tfrecord']
    assert status == 1 and _unknown(output) == sorted(str(out / name) for name in expected)

    again = ['--input', str(root), '--output', str(out), *LOCAL, '--overwrite', '--no-analyze']
    dataset = launcher.run([*again, '--splits', 'train=1', '--num-shards', '1'])
    shard = dataset['splits']['train']['shards'][0]['path']
    tfds_files = ['dataset_info.json', 'features.json', 'image.class.label.labels.txt']
    build_files = ['_SUCCESS', 'dataset.json', 'rejected.jsonl', shard, shard + '.idx', *tfds_files]
    assert _files(out) == sorted([*build_files, *USER_FILES])
    assert _folders(out) == ['report', 'train']  # no empty test/, val/, reencoded/ ...
    status, output = _verify(out, capsys)
    assert status == 1 and _unknown(output) == sorted(str(out / name) for name in USER_FILES)
    for name in USER_FILES:
        (out / name).unlink()
    status, output = _verify(out, capsys)
    assert status == 0, output
