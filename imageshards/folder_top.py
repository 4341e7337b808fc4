"""What is at the top of a folder, local or on gs://, found without listing what is below its
subfolders: enough to tell a tree of class folders from a folder of archives or arrays
(pipelines/inputs/forms.py) before a tree's whole listing."""

import os

from imageshards import gcs
from imageshards import storage


def list_top(folder, limit=1000) -> tuple:
    """(files, whether it holds folders) at the top of a folder, the files' paths sorted, at
    most `limit` of them; on gs://, from one request with a delimiter (retried, its failure
    one line: gcs.py). A folder of another object store is taken as a tree's: (no files,
    True)."""
    folder = folder.rstrip('/')
    if folder.startswith('gs://'):
        bucket, _, prefix = folder[len('gs://') :].partition('/')
        prefix = prefix + '/' if prefix else ''
        with gcs.answering('listing', f'gs://{bucket}/{prefix}'):
            found = gcs.client().list_blobs(
                bucket, prefix=prefix, delimiter='/', max_results=limit, retry=gcs.retry()
            )
            names = [f'gs://{bucket}/{blob.name}' for blob in found if not blob.name.endswith('/')]
            return sorted(names), bool(found.prefixes)
    if storage.is_uri(folder):
        return [], True
    with os.scandir(folder) as entries:
        found = [(entry.path, entry.is_dir()) for entry in entries]
    files = sorted(path for path, is_dir in found if not is_dir)
    return files[:limit], any(is_dir for _, is_dir in found)
