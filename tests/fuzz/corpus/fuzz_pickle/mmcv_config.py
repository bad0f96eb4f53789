model = dict(
    type='Recognizer3D',
    backbone=dict(type='SwinTransformer3D', patch_size=(2, 4, 4), window_size=(8, 7, 7)),
    cls_head=dict(type='I3DHead', in_channels=768, num_classes=400))
img_norm_cfg = dict(
    mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_bgr=False)
data_preprocessor = dict(
    type='ActionDataPreprocessor',
    mean=[
        123.675,
        116.28,
        103.53,
    ],
    std=[58.395, 57.12, 57.375],
    format_shape='NCTHW')
