"""The compact backbone of the trainer's own detector and segmenter: features at 1/4 scale.

Five stages of 3x3 convolutions with BatchNorm and ReLU (a stem at 1/2, then stages at 1/4,
1/8, 1/16 and 1/32, widest where the maps are smallest), whose outputs a feature pyramid adds
top-down (1x1 laterals, bilinear upsampling) into one map at 1/4 of the input's size, which
CenterNet's and DeepLab's heads read. About 1.9 million weights, most of the work at 1/4
scale left to the heads: what trains on a 2-core CPU in minutes (the smoke configs; on the
smoke set, widening the deep stages and dropping a 3x3 convolution after the pyramid raised val
mAP@0.5 at epoch 4 from 0.019 to 0.067 at the same speed), behind the input, losses and export
a larger model would have.

Every layer with weights has a name of its own (`--init-from` copies weights by name,
trainer/warm_start.py): a detector's backbone starts a segmenter and the other way round.
"""

import keras

STAGES = ((32, 2), (64, 2), (160, 2), (320, 2))  # (channels, convolutions) at 1/4 ... 1/32
PYRAMID = 64  # channels of the pyramid's maps
STAGE_SCORES = 1, 2, 3  # the stages (1/8, 1/16, 1/32) whose class scores the heads add


def conv(x, channels, name, strides=1, kernel=3):
    x = keras.layers.Conv2D(
        channels, kernel, strides, padding='same', use_bias=False, name=f'{name}_conv'
    )(x)
    x = keras.layers.BatchNormalization(name=f'{name}_bn')(x)
    return keras.layers.ReLU(name=f'{name}_relu')(x)


def features(images, width=PYRAMID) -> 'keras.KerasTensor':
    """uint8 images [B, H, W, 3] -> float features [B, H/4, W/4, width] (H, W multiples of 32)."""
    return features_and_stages(images, width)[0]


def features_and_stages(images, width=PYRAMID) -> tuple:
    """(`features`, [the stages' outputs at 1/4, 1/8, 1/16, 1/32 before the pyramid]): what a
    head that reads each scale on its own takes (the segmenter's class scores)."""
    x = keras.layers.Rescaling(1 / 127.5, offset=-1.0, name='backbone_rescale')(images)
    x = conv(x, 24, 'backbone_stem', strides=2)
    levels = []
    for stage, (channels, convs) in enumerate(STAGES):
        x = conv(x, channels, f'backbone_stage{stage}_down', strides=2)
        for i in range(1, convs):
            x = conv(x, channels, f'backbone_stage{stage}_conv{i}')
        levels.append(x)
    top = keras.layers.Conv2D(width, 1, name='pyramid_lateral3')(levels[-1])
    for stage in range(len(levels) - 2, -1, -1):
        lateral = keras.layers.Conv2D(width, 1, name=f'pyramid_lateral{stage}')(levels[stage])
        up = keras.layers.UpSampling2D(2, interpolation='bilinear', name=f'pyramid_up{stage}')(top)
        top = keras.layers.Add(name=f'pyramid_add{stage}')([lateral, up])
    return top, levels


def stage_score_names(prefix) -> tuple:
    """The class layers of `stage_scores(..., prefix)`: heads (--init-from copies them only from
    a job on the same classes)."""
    return tuple(f'{prefix}_stage{stage}_logits' for stage in STAGE_SCORES)


def stage_scores(stages, num_classes, prefix, **conv_options) -> list:
    """Class scores of each deeper stage on its own (a 1x1 convolution, `conv_options` its
    initializers), upsampled to 1/4 scale, for a head to add to its own (FCN's skip scores):
    where a cell sees its object whole, which names its class, as the pyramid's 1/4 cells,
    seeing edges, mostly do not (bench/RESULTS.md, "Class scores from every stage")."""
    scores = []
    for stage, name in zip(STAGE_SCORES, stage_score_names(prefix)):
        score = keras.layers.Conv2D(num_classes, 1, name=name, **conv_options)(stages[stage])
        up = keras.layers.UpSampling2D(2**stage, interpolation='bilinear', name=f'{name}_up')
        scores.append(up(score))
    return scores
