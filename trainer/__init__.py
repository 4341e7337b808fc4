"""Training from imageshards output (tf.data input pipeline, Keras, Vertex AI): classifiers, and
detectors or segmenters on a detection build.

task.py             the entry point (`python -m trainer.task`): flags, then train.py
config.py           flags and the typed TrainConfig, with its Recipe and InputOptions
  config_help.py    the longer help texts of its flags
train.py            a run: set up, resume or start from weights, fit phase by phase,
                    keep the best epoch, test, export
  recipe.py         phases (frozen, then all), the learning-rate schedule, AdamW
  small_splits.py   a small training split: every image each epoch, the fine-tuning rate
                    kept up, BatchNorm adapted
  warm_start.py     --init-from: trained weights copied into a new model by layer
  best_epoch.py     the best epoch's weights, kept in the checkpoints
  callbacks.py      resumable checkpoints (SIGTERM), the skipped images' count
  corrupt_shards.py  a DataLossError named by the shard that holds it
  evaluate.py       validation and test passes, multi-label thresholds (thresholds.py)
  export.py         the SavedModel whose signature takes encoded images
  job.py            what a job directory holds across runs (run.json, metrics.json)
  distribute.py     strategy, precision, devices, which worker writes what
model.py            small_cnn or a keras.applications backbone, and the heads (heads.py,
                    hierarchy.py, labels.py)
input_pipeline.py   make_dataset: shards -> batches of (images, labels)
  input_options.py  its settings, one record (no TensorFlow)
  shard_reading.py  which records an epoch or an evaluation pass reads, in what order
  random_access.py  training epochs of an ArrayRecord build: a new permutation of the whole
                    split each epoch, read in parallel
  record_parser.py  records -> encoded images, labels, ids
  record_decoding.py  a batch per call, or image by image
  preprocess.py     decode, crop and resize one image (also the serving signature's)
  augment.py        augmentation
objects_train.py    a detection build's run (the task follows the build): a detector, an
                    instance segmenter or a semantic segmenter, with the recipe, checkpoints
                    and best epoch above
  objects_input.py  records -> placed, augmented images and their objects, the model's targets
  objects_geometry.py  flip, scale jitter, crop and padding that move boxes, masks, class maps
  objects_backbone.py  the compact backbone and pyramid of the two models below
  centernet.py      the detector (CenterNet): targets, losses, peaks and NMS to boxes
  instance_masks.py  its mask head for instance segmentation: targets, loss, a mask per box
  segmenter.py      the semantic segmenter, its loss and mean IoU
  deeplab.py        KerasHub's DeepLabV3+ (ResNet-18 layout) as the semantic segmenter
  retinanet.py      KerasHub's RetinaNet (ResNet-18 layout) as the library detector
  objects_evaluate.py  scoring a split: COCO box and mask mAP (coco_metrics.py) or mean IoU
  objects_export.py  the SavedModel answering boxes, scores, classes, masks (or class maps)
dataset_info.py     a build's dataset.json, read with tf.io.gfile
tft_output.py       the build's tf.Transform output, loaded: normalization, the vocabulary
submit.py           a Vertex AI custom job (`imageshards submit-training`)
"""
