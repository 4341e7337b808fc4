"""KerasHub's DeepLabV3+ as the trainer's semantic segmenter (`--model deeplabv3_plus`).

The model is the library's (`keras_hub.models.DeepLabV3Backbone`: atrous spatial pyramid
pooling on the 1/32 features, DeepLabV3+'s decoder joining the 1/4 features, features at the
input's size, then `DeepLabV3ImageSegmenter`'s 1x1 class layer), on KerasHub's
`ResNetBackbone` in ResNet-18's layout (basic blocks 2-2-2-2, 64-512 channels); the input,
loss (trainer/segmenter.py: cross-entropy + soft Dice, VOID ignored), mean IoU, checkpoints
and export are the trainer's. Images arrive as uint8 and are normalized as KerasHub's ResNet
image converter does (ImageNet's mean and deviation of [0, 1] pixels), so weights of a
KerasHub ResNet (saved where this machine can read them, then `--init-from`) start the encoder
as they were trained.

Layer names are the library's (`conv1_*`, `stack<i>_block<j>_*` in the encoder; `decoder_*`,
`spatial_pyramid_pooling`, `segmentation_*` after it; the class layer `class_logits`):
`--init-from` copies by them, and the frozen phase keeps the encoder's (`ENCODER`).

keras-hub (with tensorflow-text) is imported here only: the other models need neither.
"""

import keras

from trainer import segmenter

NAME = 'deeplabv3_plus'
ENCODER = ('conv1_', 'stack')  # the ResNet encoder's layer names
MEAN = (0.485, 0.456, 0.406)  # KerasHub's ResNet converter: ImageNet's, of [0, 1] pixels
STD = (0.229, 0.224, 0.225)
RESNET_18 = {
    'input_conv_filters': [64],
    'input_conv_kernel_sizes': [7],
    'stackwise_num_filters': [64, 128, 256, 512],
    'stackwise_num_blocks': [2, 2, 2, 2],
    'stackwise_num_strides': [1, 2, 2, 2],
    'block_type': 'basic_block',
    'use_pre_activation': False,
}


def build(num_classes, canvas, name=NAME) -> keras.Model:
    """uint8 images [B, *canvas, 3] -> logits [B, *canvas / 4, num_classes] (float32), which
    `segmenter.class_map` upsamples to the canvas."""
    import keras_hub  # noqa: PLC0415 (heavy, and only this model needs it)

    encoder = keras_hub.models.ResNetBackbone(**RESNET_18, image_shape=(*canvas, 3))
    backbone = keras_hub.models.DeepLabV3Backbone(
        image_encoder=encoder,
        spatial_pyramid_pooling_key='P5',
        upsampling_size=8,  # 1/32 -> 1/4, where the decoder joins the P2 features
        dilation_rates=[6, 12, 18],
        low_level_feature_key='P2',
        projection_filters=48,
        image_shape=(*canvas, 3),
    )
    images = keras.Input((*canvas, 3), dtype='uint8', name='images')
    x = keras.layers.Rescaling(1 / 255.0, name='input_scale')(images)
    x = keras.layers.Normalization(mean=MEAN, variance=[s * s for s in STD], name='input_norm')(x)
    # DeepLabV3ImageSegmenter's class layer (1x1, no bias) on the backbone's features, named as
    # the trainer's heads are (`--init-from` copies it only from the same classes). The library
    # upsamples 256 features to the input's size, then classifies each pixel; a 1x1 layer
    # without bias and bilinear upsampling are both linear and commute, so classifying at 1/4
    # and upsampling the logits is the same function at a fraction of the work: the model ends
    # at 1/4, where the loss scores it (trainer/segmenter.py), and `segmenter.class_map`
    # upsamples for evaluation and serving.
    features = keras.Model(backbone.inputs, backbone.get_layer('segmentation_head_relu').output)
    x = keras.layers.Conv2D(num_classes, 1, use_bias=False, name=segmenter.LOGITS)(features(x))
    return keras.Model(
        images, keras.layers.Activation('linear', dtype='float32', name='classes')(x), name=name
    )
