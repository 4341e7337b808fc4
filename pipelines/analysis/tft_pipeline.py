"""The tf.Transform output of a build written by a TFT pipeline (tft_beam), in TFT's own layout.

    dataset.json `analysis` + the build's labels, format, label levels and image size
        -> tft_beam.AnalyzeDataset(imageshards/tft_preprocessing.py) over no records
        -> WriteTransformFn: transform_fn/, transformed_metadata/
        -> the raw metadata: metadata/ (what `TFTransformOutput.raw_feature_spec()` reads)
    all staged under the build's temporary folder; Finalize (or, locally, the launcher) moves
    them into place before `_SUCCESS`.

The analysis reads no records: what the graph needs of the data, the pixel statistics and the
label vocabulary, is the build's own (measured as the shards are written:
pipelines/analysis/analyze.py) and reaches the graph as two assets
(imageshards/tft_assets.py), which TFT's analyzers of imageshards/tft_preprocessing.py write
without looking at the records they are given.

Where it runs: on a distributed runner (Dataflow), as steps of the build's pipeline
(`WriteTransformOutput`). On the local runner, `write` below, in a process of the launcher's
(pipelines/local/graph_process.py) with neutral statistics: TensorFlow and
tensorflow_transform are then imported by that process alone, instead of by every worker
process (each import costs seconds of CPU and hundreds of MB: bench/RESULTS.md, "Cost of the
tf.Transform analysis").
The launcher keeps that graph (pipelines/analysis/graph_cache.py) and writes the build's output
from it with the build's own assets, as a later build of the same kind does with no TFT at all.
"""

import apache_beam as beam

from imageshards import layout
from imageshards import storage


class WriteTransformOutput(beam.PTransform):
    """The pipeline -> one element once the TFT output is staged.

    Args:
        analysis: a PCollection of dataset.json's `analysis` entry.
        settings: the build's TransformSettings (pipelines/core/settings.py): its labels,
            record kind and image size, and where the output is staged.
    """

    def __init__(self, analysis, settings):
        super().__init__()
        self._analysis = analysis
        self._settings = settings

    def expand(self, pipeline):
        # pylint: disable=import-outside-toplevel
        import tensorflow_transform.beam as tft_beam
        from tensorflow_transform.tf_metadata import schema_utils
        from tfx_bsl.tfxio import tf_example_record

        from imageshards import tft_preprocessing

        settings = self._settings
        schema = schema_utils.schema_from_feature_spec(
            tft_preprocessing.raw_feature_spec(settings.kind)
        )
        tfxio = tf_example_record.TFExampleBeamRecord(
            physical_format='tfrecord', telemetry_descriptors=['imageshards'], schema=schema
        )
        preprocessing_fn = tft_preprocessing.make_preprocessing_fn(
            settings.labels, self._analysis, settings.kind, settings.image_size
        )
        records = pipeline | 'NoRecords' >> beam.Create([]).with_output_types(bytes)
        batches = records | 'ToRecordBatches' >> tfxio.BeamSource()
        with tft_beam.Context(temp_dir=settings.temp_dir):
            transform_fn = (
                batches,
                tfxio.TensorAdapterConfig(),
            ) | 'AnalyzeDataset' >> tft_beam.AnalyzeDataset(preprocessing_fn)
            written = transform_fn | 'WriteTransformFn' >> tft_beam.WriteTransformFn(
                settings.staging_dir
            )
        return written | 'WriteRawMetadata' >> beam.Map(
            _write_raw_metadata, schema, storage.join(settings.staging_dir, layout.RAW_METADATA_DIR)
        )


def _write_raw_metadata(unused_written, schema, path):
    # pylint: disable=import-outside-toplevel
    from tensorflow_transform.tf_metadata import dataset_metadata
    from tensorflow_transform.tf_metadata import metadata_io

    metadata_io.write_metadata(dataset_metadata.DatasetMetadata(schema), path)
    return path


def write(settings) -> None:
    """Runs WriteTransformOutput for `settings` (a TransformSettings) with neutral pixel
    statistics, in a pipeline of this process: the graph, whose assets the launcher replaces
    with the build's (graph_cache.write)."""
    # pylint: disable=import-outside-toplevel
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    from imageshards import tft_preprocessing

    with beam.Pipeline(runner=fn_runner.FnApiRunner()) as pipeline:
        analysis = pipeline | 'NeutralStatistics' >> beam.Create([tft_preprocessing.NEUTRAL])
        _ = pipeline | 'WriteTransformOutput' >> WriteTransformOutput(analysis, settings)
