"""The GCS emulator, honouring the generation precondition that Cloud Storage honours and the
emulator ignores: `ifGenerationMatch` on an upload and on a delete.

    python bench/gcs_preconditions.py start [the emulator's flags]

Cloud Storage refuses such a request with 412 Precondition Failed unless the object's live
generation is the one given, 0 meaning "no live object"
(https://cloud.google.com/storage/docs/request-preconditions). The emulator serves one request
at a time (a plain HTTPServer), so checking and then writing here is as atomic as it is there.
tests/gcs_emulator.py runs this in place of the emulator where a fixture asks for it.

With `--in-memory` it also keeps no copy of its metadata: the emulator rewrites all of it, as
JSON, after every write (0.1 to 0.2 s with a few thousand objects, one request at a time), for a
file that it reads only when it starts; bench/gcs_latency.py would measure that instead of the
build.
"""

import sys
from http import HTTPStatus

from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import objects
from gcp_storage_emulator.storage import Storage


def _generation(storage, bucket, name):
    try:
        return int(storage.get_file_obj(bucket, name)['generation'])
    except NotFound:
        return 0


def _uploaded_name(request):
    if 'name' in request.query:
        return request.query['name'][0]
    data = request.data
    return data['meta'].get('name') if isinstance(data, dict) and 'meta' in data else None


def _deleted_name(request):
    return request.params['object_id']


def _with_precondition(handler, name_of):
    def checked(request, response, storage, *args, **kwargs):
        wanted = request.query.get('ifGenerationMatch')
        name = name_of(request)
        if wanted and name is not None:
            if int(wanted[0]) != _generation(storage, request.params['bucket_name'], name):
                response.status = HTTPStatus.PRECONDITION_FAILED
                message = 'At least one of the pre-conditions you specified did not hold.'
                response.json({'error': {'code': 412, 'message': message}})
                return None
        return handler(request, response, storage, *args, **kwargs)

    return checked


def main():
    objects.insert = _with_precondition(objects.insert, _uploaded_name)
    objects.delete = _with_precondition(objects.delete, _deleted_name)
    if '--in-memory' in sys.argv:
        Storage._write_config_to_file = lambda self: None
    # Imported after the patch: the server's routing table takes the handlers as it loads.
    from gcp_storage_emulator.__main__ import main as emulator_main  # noqa: PLC0415

    emulator_main(sys.argv[1:])


if __name__ == '__main__':
    main()
