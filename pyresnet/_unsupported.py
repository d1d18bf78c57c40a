"""Keras names pyresnet does not provide, and why: a module's ``__getattr__``
turns a lookup of one of them into an AttributeError that says so, instead
of a confusing failure later (issue 17).  pyresnet is an image-model
framework (NHWC float32 images, 2D convolutions); text and sequence layers
are out of its scope."""

SEQUENCE = "text and sequence models are out of pyresnet's scope (an image-model framework)"
VOLUME = ("only 2D (image) convolutions and pooling, Conv1D and the global 1D poolings "
          "are provided")

NOT_YET = "not implemented yet; a Layer subclass of your own can provide it"

LAYERS = {
    **{name: NOT_YET for name in (
        "RandomBrightness", "SpatialDropout2D", "GaussianNoise", "GaussianDropout", "Cropping2D",
        "Resizing", "CenterCrop", "GroupNormalization", "UnitNormalization", "PReLU", "ELU")},
    **{name: SEQUENCE for name in (
        "Embedding", "LSTM", "GRU", "SimpleRNN", "RNN", "Bidirectional", "TimeDistributed",
        "LSTMCell", "GRUCell", "SimpleRNNCell", "StackedRNNCells", "ConvLSTM1D", "ConvLSTM2D",
        "ConvLSTM3D", "MultiHeadAttention", "Attention", "AdditiveAttention",
        "GroupQueryAttention", "TextVectorization", "StringLookup", "IntegerLookup", "Hashing",
        "CategoryEncoding", "Masking")},
    **{name: VOLUME for name in (
        "Conv3D", "Conv1DTranspose", "Conv3DTranspose", "SeparableConv1D",
        "DepthwiseConv1D", "MaxPooling1D", "MaxPooling3D", "AveragePooling1D",
        "AveragePooling3D", "GlobalAveragePooling3D", "GlobalMaxPooling3D", "UpSampling1D",
        "UpSampling3D",
        "ZeroPadding1D", "ZeroPadding3D", "Cropping1D", "Cropping3D", "MaxPool1D", "MaxPool3D",
        "AvgPool1D", "AvgPool3D")},
}

def getattr_for(module_name, table):
    """A module ``__getattr__`` raising AttributeError for ``table``'s names
    with the reason, and Python's usual AttributeError for others."""

    def __getattr__(name):
        if name in table:
            raise AttributeError(f"module '{module_name}' has no attribute '{name}': keras "
                                 f"{module_name.split('.')[-1]}.{name} is not provided by "
                                 f"pyresnet ({table[name]})")
        raise AttributeError(f"module '{module_name}' has no attribute '{name}'")

    return __getattr__

