"""The tf.Transform output of a build, in TFT's own layout, made from the analysis sample.

    sample records (serialized, as in the shards) + dataset.json `analysis`
        -> TFExampleBeamRecord -> tft_beam.AnalyzeDataset(imageshards/transform.py)
        -> WriteTransformFn: transform_fn/, transformed_metadata/
        -> the raw metadata: metadata/ (what `TFTransformOutput.raw_feature_spec()` reads)
    all staged under the build's temporary folder; Finalize (or `complete_after_build`) moves
    them into place before `_SUCCESS`.

Where it runs: on a distributed runner (Dataflow), as steps of the build's pipeline
(`WriteTransformOutput`); on the local runner, as a small pipeline of the launching process once
the build's pipeline is done (`complete_after_build`), reading the sample records the build left
in its temporary folder. TensorFlow and tensorflow_transform are then imported by the launcher
alone, in a background thread while the workers validate and write, instead of by every worker
process (each import costs ~4 s of CPU and ~850 MB on the 2-core machine of bench/RESULTS.md).
"""

import logging
import threading

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from imageshards import tfrecord
from pipelines import finalize

_LOG = logging.getLogger(__name__)
_SAMPLE_GLOB = 'analysis/sample-*.tfrecord'  # under the build's temporary folder


class WriteTransformOutput(beam.PTransform):
    """Serialized sample records -> one element once the TFT output is staged.

    Args:
        analysis: a PCollection of dataset.json's `analysis` entry.
        labels: the build's label names, by id.
        fmt: the build's format (`examples` or `paths`).
        levels: the build's label level names.
        image_size: the side of the transform's `image` output.
        staging_dir: where transform_fn/, transformed_metadata/ and metadata/ are written.
        temp_dir: TFT's own temporary folder.
    """

    def __init__(self, analysis, labels, fmt, levels, image_size, staging_dir, temp_dir):
        super().__init__()
        self._analysis = analysis
        self._labels = tuple(labels)
        self._format = fmt
        self._levels = tuple(levels)
        self._image_size = image_size
        self._staging_dir = staging_dir
        self._temp_dir = temp_dir

    def expand(self, records):
        # pylint: disable=import-outside-toplevel
        import tensorflow_transform.beam as tft_beam
        from tensorflow_transform.tf_metadata import schema_utils
        from tfx_bsl.tfxio import tf_example_record

        from imageshards import transform

        schema = schema_utils.schema_from_feature_spec(
            transform.raw_feature_spec(self._format, self._levels)
        )
        tfxio = tf_example_record.TFExampleBeamRecord(
            physical_format='tfrecord', telemetry_descriptors=['imageshards'], schema=schema
        )
        preprocessing_fn = transform.make_preprocessing_fn(
            self._labels, self._analysis, self._format, self._levels, self._image_size
        )
        batches = records | 'ToRecordBatches' >> tfxio.BeamSource()
        # pyarrow.RecordBatch of sample records
        with tft_beam.Context(temp_dir=self._temp_dir):
            transform_fn = (
                batches,
                tfxio.TensorAdapterConfig(),
            ) | 'AnalyzeDataset' >> tft_beam.AnalyzeDataset(preprocessing_fn)
            written = transform_fn | 'WriteTransformFn' >> tft_beam.WriteTransformFn(
                self._staging_dir
            )
        return written | 'WriteRawMetadata' >> beam.Map(
            _write_raw_metadata, schema, FileSystems.join(self._staging_dir, 'metadata')
        )


def _write_raw_metadata(unused_written, schema, path):
    # pylint: disable=import-outside-toplevel
    from tensorflow_transform.tf_metadata import dataset_metadata
    from tensorflow_transform.tf_metadata import metadata_io

    metadata_io.write_metadata(dataset_metadata.DatasetMetadata(schema), path)
    return path


def import_meanwhile():
    """Starts importing TensorFlow and tensorflow_transform in a daemon thread of this process,
    so that `complete_after_build` finds them loaded; returns the thread."""
    thread = threading.Thread(target=_import_libraries, name='import-tensorflow', daemon=True)
    thread.start()
    return thread


def _import_libraries():
    try:
        # pylint: disable=import-outside-toplevel,unused-import
        import tensorflow_transform.beam  # noqa: F401
        from tfx_bsl.tfxio import tf_example_record  # noqa: F401

        from imageshards import transform  # noqa: F401
    except Exception:  # pylint: disable=broad-except  # the import in complete_after_build says why
        _LOG.debug('importing tensorflow_transform in the background failed', exc_info=True)


def _read_records(path):
    with FileSystems.open(path) as f:
        yield from tfrecord.read_records(f, path)


def complete_after_build(output_dir, dataset, staging_dir, temp_dir, image_size):
    """Writes the TFT output of a build whose pipeline left its sample records behind, moves it
    into place and marks the build complete (local runner)."""
    # pylint: disable=import-outside-toplevel
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    pattern = finalize.join(output_dir, finalize.TEMP_DIR, _SAMPLE_GLOB)
    paths = sorted(m.path for r in FileSystems.match([pattern]) for m in r.metadata_list)
    analysis = dataset['analysis']
    with beam.Pipeline(runner=fn_runner.FnApiRunner()) as pipeline:
        records = (
            pipeline
            | 'SampleFiles' >> beam.Create(paths)
            | 'ReadSample' >> beam.FlatMap(_read_records)
        )
        _ = records | 'WriteTransformOutput' >> WriteTransformOutput(
            pipeline | 'Analysis' >> beam.Create([analysis]),
            dataset['labels'],
            dataset['format'],
            list(dataset.get('label_levels', {})),
            image_size,
            staging_dir,
            temp_dir,
        )
    finalize.publish_transform(output_dir, staging_dir, analysis)
    finalize.complete(output_dir)
