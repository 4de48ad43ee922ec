"""dlib itself as the reference for the rebuilt recognizer (issue 35): dlib's own detector (HOG,
one upsampling, as `face_recognition` runs it), its 5-point shape predictor, its chips
(`compute_face_descriptor`: 150 px, padding 0.25) and its float network, with the weights of the
face_recognition_models sdist. Run by .cache/venv-dlib's Python (dlib-bin; tools/setup-real-faces.sh).

    dlib_reference.py MODELS_DIR PHOTO... > faces.json

Prints {photo file name: [{"box": [left, top, right, bottom], "descriptor": [128 floats]}]}, the
descriptors as dlib gives them (not normalised).
"""

import json
import sys
from pathlib import Path

import dlib


def main(models: str, *photos: str) -> None:
    detector = dlib.get_frontal_face_detector()
    landmarks = dlib.shape_predictor(f"{models}/shape_predictor_5_face_landmarks.dat")
    network = dlib.face_recognition_model_v1(f"{models}/dlib_face_recognition_resnet_model_v1.dat")
    answer = {}
    for path in photos:
        image = dlib.load_rgb_image(path)
        faces = []
        for rect in detector(image, 1):
            descriptor = network.compute_face_descriptor(image, landmarks(image, rect))
            faces.append({"box": [rect.left(), rect.top(), rect.right(), rect.bottom()],
                          "descriptor": list(descriptor)})
        answer[Path(path).name] = faces
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main(*sys.argv[1:])
