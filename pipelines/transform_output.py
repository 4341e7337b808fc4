"""The tf.Transform output of a build, in TFT's own layout, made from the analysis sample.

    sample records (serialized, as in the shards) + dataset.json `analysis`
        -> TFExampleBeamRecord -> tft_beam.AnalyzeDataset(imageshards/transform.py)
        -> WriteTransformFn: transform_fn/, transformed_metadata/
        -> the raw metadata: metadata/ (what `TFTransformOutput.raw_feature_spec()` reads)
    all staged under the build's temporary folder; Finalize (or, locally, the launcher) moves
    them into place before `_SUCCESS`.

Where it runs: on a distributed runner (Dataflow), as steps of the build's pipeline
(`WriteTransformOutput`). On the local runner, in a helper process of the launcher (`Helper`),
as a small pipeline of its own over the sample records the build's pipeline hands over in a
local folder: TensorFlow and tensorflow_transform are then imported by that process alone,
while the launcher lists and the workers validate, instead of by every worker process (each
import costs ~4 s of CPU and ~850 MB on the 2-core machine of bench/RESULTS.md), and the
transform runs while the workers write the shards.
"""

import glob
import json
import logging
import os
import subprocess
import sys
import time

import apache_beam as beam

from imageshards import console
from imageshards import layout
from imageshards import storage
from imageshards import tfrecord

_LOG = logging.getLogger(__name__)
SETTINGS = 'settings.json'  # what the Helper's pipeline is made of, from the launcher
JOB = 'analysis.json'  # the hand-over from the pipeline to the Helper
SAMPLE_GLOB = 'sample-*.tfrecord'  # the sample's records, in the Helper's work folder


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
            _write_raw_metadata, schema, storage.join(self._staging_dir, layout.RAW_METADATA_DIR)
        )


def _write_raw_metadata(unused_written, schema, path):
    # pylint: disable=import-outside-toplevel
    from tensorflow_transform.tf_metadata import dataset_metadata
    from tensorflow_transform.tf_metadata import metadata_io

    metadata_io.write_metadata(dataset_metadata.DatasetMetadata(schema), path)
    return path


class Helper:
    """The process that writes the TFT output of a build on the local runner.

    Started before the build lists its inputs, it imports TensorFlow and tensorflow_transform
    on the core the launcher leaves free, builds its pipeline once the launcher has listed the
    inputs (`SETTINGS`), and runs it as soon as the build's pipeline hands the sample over (`JOB`
    in `work_dir`, written with the sample records once the analysis is done, before the shards
    are written): the transform is written while the workers write the shards. A process of its
    own, not a thread: importing TensorFlow holds the interpreter lock for seconds, which would
    stall the launcher that relays the workers' data.
    """

    def __init__(self, work_dir, staging_dir, temp_dir):
        self.work_dir = work_dir
        self._log = os.path.join(work_dir, 'transform.log')
        with open(self._log, 'wb') as log:
            self._process = subprocess.Popen(  # pylint: disable=consider-using-with
                [sys.executable, '-m', __name__, work_dir, staging_dir, temp_dir],
                stdout=log,
                stderr=log,
            )

    def lower_priority(self):
        """Lets the build's own processes go first: the helper takes the time they leave."""
        try:
            os.setpriority(os.PRIO_PROCESS, self._process.pid, 10)
        except OSError:  # gone already, or not allowed: it only runs a little slower
            pass

    def finish(self):
        """Waits for the TFT output; raises RuntimeError with the helper's last lines if it
        failed."""
        if self._process.poll() is None:
            _LOG.info('writing the tf.Transform output')
        if self._process.wait() != 0:
            with open(self._log, encoding='utf-8', errors='replace') as f:
                tail = ''.join(f.readlines()[-20:])
            raise RuntimeError(f'writing the tf.Transform output failed:\n{tail}')

    def stop(self):
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()


def prepare(work_dir, labels, fmt, levels, image_size):
    """What the Helper needs to build its pipeline, known once the inputs are listed: it builds
    it while the build runs, and only runs it once the sample is handed over."""
    settings = {
        'labels': list(labels),
        'format': fmt,
        'levels': list(levels),
        'image_size': image_size,
    }
    storage.write_atomically(os.path.join(work_dir, SETTINGS), json.dumps(settings).encode())


def hand_over(analysis, work_dir):
    """The pipeline's last analysis step on the local runner: dataset.json's `analysis` for the
    Helper, as JOB, once the sample's records are in `work_dir`."""
    storage.write_atomically(os.path.join(work_dir, JOB), json.dumps(analysis).encode('utf-8'))
    return JOB


def _wait_for(path, interval=0.05):
    while not os.path.exists(path):
        time.sleep(interval)
    with open(path, encoding='utf-8') as f:
        return json.load(f)


def _sample_records(unused_impulse, work_dir):
    _wait_for(os.path.join(work_dir, JOB))
    for path in sorted(glob.glob(os.path.join(work_dir, SAMPLE_GLOB))):
        with open(path, 'rb') as f:
            yield from tfrecord.read_records(f, path)


def _analysis(unused_impulse, work_dir):
    return _wait_for(os.path.join(work_dir, JOB))


def write(work_dir, settings, staging_dir, temp_dir):
    """Runs WriteTransformOutput on the sample records handed over in `work_dir`, in a pipeline
    of this process that waits for them."""
    # pylint: disable=import-outside-toplevel
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    with beam.Pipeline(runner=fn_runner.FnApiRunner()) as pipeline:
        start = pipeline | 'Start' >> beam.Impulse()
        records = start | 'ReadSample' >> beam.FlatMap(_sample_records, work_dir)
        analysis = start | 'ReadAnalysis' >> beam.Map(_analysis, work_dir)
        _ = records | 'WriteTransformOutput' >> WriteTransformOutput(
            analysis,
            settings['labels'],
            settings['format'],
            settings['levels'],
            settings['image_size'],
            staging_dir,
            temp_dir,
        )


def main(argv=None):
    """The Helper process: WORK_DIR STAGING_DIR TEMP_DIR."""
    work_dir, staging_dir, temp_dir = (sys.argv[1:] if argv is None else argv)[:3]
    console.configure_logging()
    # pylint: disable=import-outside-toplevel,unused-import
    import tensorflow_transform.beam  # noqa: F401  (the seconds this process is for)
    from tfx_bsl.tfxio import tf_example_record  # noqa: F401

    from imageshards import transform  # noqa: F401

    write(work_dir, _wait_for(os.path.join(work_dir, SETTINGS)), staging_dir, temp_dir)
    return 0


if __name__ == '__main__':
    sys.exit(main())
