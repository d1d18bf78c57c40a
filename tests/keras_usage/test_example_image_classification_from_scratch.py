"""The keras-io example "Image classification from scratch" (fchollet,
last modified 2023/11/09), run with pyresnet on JPEG files this test writes
from real CIFAR-10 cats and dogs into ``PetImages/Cat`` and ``PetImages/Dog``
(150 each, plus three files that are not JFIF for the example's filter to
delete), asserting what the example states: the files deleted, "Found N
files belonging to 2 classes", the 80/20 split, label 0 is a cat and 1 a
dog, float32 (batch, height, width, 3) batches in [0, 255], augmentation
that changes the images but not their shape, a model that trains (the loss
goes down) with a checkpoint per epoch, and inference on one file.

The example's code is kept with ``import keras`` made ``import pyresnet as
keras``; the lines changed otherwise say why in a comment: the image size,
batch size, widths and epochs are scaled down to a CPU test (180x180 images,
an Xception-like net of widths 128..1024 and 25 epochs take hours on two
cores), ``SeparableConv2D`` is a ``Conv2D`` here, and tf.data's
``take``/``AUTOTUNE``/``num_parallel_calls`` are not in pyresnet's Dataset.
"""
import os
import re

import numpy as np
from PIL import Image


def _write_pet_images(root, cifar10):
    (x_train, y_train), _ = cifar10
    labels = y_train[:, 0]
    for folder_name, cifar_class in (("Cat", 3), ("Dog", 5)):
        folder = os.path.join(root, "PetImages", folder_name)
        os.makedirs(folder)
        images = x_train[labels == cifar_class][:150]
        for i, img in enumerate(images):
            name = "6779.jpg" if (folder_name, i) == ("Cat", 0) else f"{i}.jpg"
            Image.fromarray(img).save(os.path.join(folder, name), format="JPEG")
        # not JFIF: a PNG under a .jpg name, and a truncated file
        Image.fromarray(images[0]).save(os.path.join(folder, "broken_png.jpg"), format="PNG")
        with open(os.path.join(folder, "truncated.jpg"), "wb") as f:
            f.write(b"\xff\xd8\xff")
    with open(os.path.join(root, "PetImages", "Dog", "empty.jpg"), "wb"):
        pass


def test_image_classification_from_scratch(cifar10, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _write_pet_images(str(tmp_path), cifar10)

    # ## Setup
    import numpy as np  # noqa: F811 (the example's own imports)
    import pyresnet as keras  # changed: import keras
    from pyresnet import layers  # changed: from keras import layers
    import matplotlib
    matplotlib.use("Agg")  # added: no display in a test
    import matplotlib.pyplot as plt

    # ### Filter out corrupted images
    num_skipped = 0
    for folder_name in ("Cat", "Dog"):
        folder_path = os.path.join("PetImages", folder_name)
        for fname in os.listdir(folder_path):
            fpath = os.path.join(folder_path, fname)
            try:
                fobj = open(fpath, "rb")
                is_jfif = b"JFIF" in fobj.peek(10)
            finally:
                fobj.close()

            if not is_jfif:
                num_skipped += 1
                # Delete corrupted image
                os.remove(fpath)

    print(f"Deleted {num_skipped} images.")
    assert capsys.readouterr().out == "Deleted 5 images.\n"

    # ## Generate a `Dataset`
    image_size = (48, 48)  # changed: (180, 180)
    batch_size = 32  # changed: 128

    train_ds, val_ds = keras.utils.image_dataset_from_directory(
        "PetImages",
        validation_split=0.2,
        subset="both",
        seed=1337,
        image_size=image_size,
        batch_size=batch_size,
    )
    assert capsys.readouterr().out.splitlines() == [
        "Found 300 files belonging to 2 classes.",
        "Using 240 files for training.",
        "Using 60 files for validation."]
    assert train_ds.class_names == val_ds.class_names == ["Cat", "Dog"]
    assert len(train_ds) == 8 and len(val_ds) == 2

    # ## Visualize the data: label 1 is "dog" and label 0 is "cat"
    plt.figure(figsize=(10, 10))
    for images, labels in [next(iter(train_ds))]:  # changed: train_ds.take(1)
        for i in range(9):
            ax = plt.subplot(3, 3, i + 1)
            plt.imshow(np.array(images[i]).astype("uint8"))
            plt.title(int(labels[i]))
            plt.axis("off")
    images, labels = np.asarray(images), np.asarray(labels)
    assert images.shape == (32, 48, 48, 3) and images.dtype == np.float32
    assert 0 <= images.min() and images.max() <= 255 and images.max() > 200
    assert labels.shape == (32,) and set(labels.tolist()) == {0, 1}
    # every file's label is its folder: 0 Cat, 1 Dog
    all_labels = np.concatenate([np.asarray(y) for _, y in val_ds])
    assert all_labels.tolist() == [("Dog" in p) * 1 for p in val_ds.file_paths]

    # ## Using image data augmentation
    data_augmentation_layers = [
        layers.RandomFlip("horizontal"),
        layers.RandomRotation(0.1),
    ]

    def data_augmentation(images):
        for layer in data_augmentation_layers:
            images = layer(images)
        return images

    plt.figure(figsize=(10, 10))
    for images, _ in [next(iter(train_ds))]:  # changed: train_ds.take(1)
        for i in range(9):
            augmented_images = data_augmentation(images)
            ax = plt.subplot(3, 3, i + 1)
            plt.imshow(np.array(augmented_images[0]).astype("uint8"))
            plt.axis("off")
    assert augmented_images.shape == images.shape
    assert not np.allclose(np.asarray(augmented_images), np.asarray(images))
    plt.close("all")

    # ## Configure the dataset for performance
    # Apply `data_augmentation` to the training images.
    train_ds = train_ds.map(
        lambda img, label: (data_augmentation(img), label),
    )  # changed: num_parallel_calls=tf_data.AUTOTUNE dropped
    # Prefetching samples in GPU memory helps maximize GPU utilization.
    train_ds = train_ds.prefetch(2)  # changed: tf_data.AUTOTUNE
    val_ds = val_ds.prefetch(2)  # changed: tf_data.AUTOTUNE

    # ## Build a model (a small version of the Xception network)
    def make_model(input_shape, num_classes):
        inputs = keras.Input(shape=input_shape)

        # Entry block
        x = layers.Rescaling(1.0 / 255)(inputs)
        x = layers.Conv2D(32, 3, strides=2, padding="same")(x)  # changed: 128 filters
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)

        previous_block_activation = x  # Set aside residual

        for size in [32, 64]:  # changed: [256, 512, 728]; SeparableConv2D -> Conv2D
            x = layers.Activation("relu")(x)
            x = layers.Conv2D(size, 3, padding="same")(x)
            x = layers.BatchNormalization()(x)

            x = layers.Activation("relu")(x)
            x = layers.Conv2D(size, 3, padding="same")(x)
            x = layers.BatchNormalization()(x)

            x = layers.MaxPooling2D(3, strides=2, padding="same")(x)

            # Project residual
            residual = layers.Conv2D(size, 1, strides=2, padding="same")(
                previous_block_activation
            )
            x = layers.add([x, residual])  # Add back residual
            previous_block_activation = x  # Set aside next residual

        x = layers.Conv2D(128, 3, padding="same")(x)  # changed: SeparableConv2D(1024, ...)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)

        x = layers.GlobalAveragePooling2D()(x)
        if num_classes == 2:
            units = 1
        else:
            units = num_classes

        x = layers.Dropout(0.25)(x)
        # We specify activation=None so as to return logits
        outputs = layers.Dense(units, activation=None)(x)
        return keras.Model(inputs, outputs)

    model = make_model(input_shape=image_size + (3,), num_classes=2)
    assert model.output_shape == (None, 1)

    # ## Train the model
    epochs = 4  # changed: 25

    callbacks = [
        keras.callbacks.ModelCheckpoint("save_at_{epoch}.keras"),
    ]
    model.compile(
        optimizer=keras.optimizers.Adam(3e-4),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[keras.metrics.BinaryAccuracy(name="acc")],
    )
    history = model.fit(
        train_ds,
        epochs=epochs,
        callbacks=callbacks,
        validation_data=val_ds,
    )
    loss = history.history["loss"]
    assert loss[-1] < loss[0], loss
    assert {"acc", "val_acc", "val_loss"} <= set(history.history)
    assert all(0 <= a <= 1 for a in history.history["val_acc"])
    assert sorted(f for f in os.listdir(".") if f.startswith("save_at_")) == [
        f"save_at_{e}.keras" for e in range(1, epochs + 1)]
    capsys.readouterr()

    # ## Run inference on new data (augmentation and dropout inactive)
    img = keras.utils.load_img("PetImages/Cat/6779.jpg", target_size=image_size)
    plt.imshow(img)

    img_array = keras.utils.img_to_array(img)
    img_array = keras.ops.expand_dims(img_array, 0)  # Create batch axis

    predictions = model.predict(img_array)
    score = float(keras.ops.sigmoid(predictions[0][0]))
    print(f"This image is {100 * (1 - score):.2f}% cat and {100 * score:.2f}% dog.")
    plt.close("all")
    out = capsys.readouterr().out
    m = re.search(r"This image is (\d+\.\d\d)% cat and (\d+\.\d\d)% dog\.", out)
    assert m and abs(float(m.group(1)) + float(m.group(2)) - 100) < 0.011
    # predict is deterministic (no augmentation, no dropout at inference)
    np.testing.assert_array_equal(model.predict(img_array, verbose=0), predictions)
