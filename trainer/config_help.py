"""The longer help texts of the trainer's flags (trainer/config.py)."""

from trainer import input_options

MODEL_HELP = (
    'small_cnn: three conv blocks, for quick runs; or any keras.applications model by name '
    '(resnet50, efficientnet_b0, ResNet50V2, MobileNetV3Small, EfficientNetV2B0, ConvNeXtTiny, '
    '...; case and underscores do not matter), its own preprocessing included: random initial '
    'weights unless --init-from. A detection build trains centernet (a compact CenterNet '
    "detector) or retinanet (KerasHub's RetinaNet on a ResNet-18 layout, at multiples of 128 "
    'px) or, for semantic segmentation, segmenter (a compact one) or deeplabv3_plus '
    "(KerasHub's DeepLabV3+ on a ResNet-18 layout); small_cnn means the task's compact model there"
)
TASK_HELP = (
    "what a detection build trains (auto: the build's kind says: semantic_segmentation where its "
    'records carry class maps, instance_segmentation (boxes and their masks) where they carry '
    'instance masks, else detection); detection on a build with masks trains boxes only, '
    'semantic_segmentation on one draws class maps from them'
)
CROP_HELP = (
    'min,max share of an image a training crop keeps, or auto: 0.5,1 for a training split under '
    f'{input_options.LARGE_TRAINING_SET:,} images, the ImageNet recipe 0.08,1 from there on; a '
    'multi-label build 1,1 (no crop: a crop can cut out an object its labels name; measured on '
    'shapes, test micro F1 0.96 without crops, 0.89 with 0.8,1 crops, 0.80 with 0.08,1)'
)
EVAL_CROP_HELP = (
    'share of each side of the central crop that evaluation and the served model see, or auto: '
    f'{input_options.CENTRAL_CROP} (the Inception/ResNet recipe), a multi-label build the whole '
    'image (1)'
)
INIT_FROM_HELP = (
    "trained weights to start from: an earlier job's --job-dir (its exported model, else its "
    'newest checkpoint: the best epoch either way), a SavedModel folder, a .keras file, a Keras '
    'HDF5 weights file (.h5, such as the keras.applications downloads), or imagenet: '
    "the --model's keras.applications weights, downloaded or, without a network, read from the "
    'Keras cache (~/.keras/models; or give the file itself). Layers are copied by name where '
    'their shapes match; heads are new unless the source is a job on the same classes'
)
FROZEN_HELP = (
    'with --init-from: the first N epochs train the heads alone (the rest frozen), then the '
    'whole model trains at --fine-tune-learning-rate; BatchNorm layers stay in inference mode '
    '(their statistics kept) all along'
)
