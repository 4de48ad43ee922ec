//! Faces in `/v1/analyze` end to end over HTTP on loopback: the real binary, generated face models
//! of the three detector formats (tools/models/faces.py: SCRFD and YuNet, YOLOv5-face for drawn
//! faces, and an ArcFace-format recognizer), real photos, each face held to the independent Python reference
//! (tools/faces_reference.py: Pillow, NumPy, scikit-image's similarity, OpenCV's warp, ONNX
//! Runtime) and the people to scikit-learn's DBSCAN on the same embeddings; and photos drawn for
//! the purpose (tools/draw_faces.py), whose faces must be found where they were drawn and be
//! their persons.

use crate::common;

use std::path::{Path, PathBuf};

use common::{ServerConfig, camera_photos, file_name, python_json, resized_jpegs, setup_var, store_named};
use serde_json::{Value, json};

/// tools/faces_reference.py's answer.
fn reference(args: &[&str], paths: &[PathBuf], stdin: Option<&Value>) -> Value {
    python_json("faces_reference.py", args, paths, stdin)
}

/// `/v1/analyze` over `photos` (one store, one request) on a server with the face models in
/// `folder`.
fn analyze(photos: &[PathBuf], folder: &str) -> Value {
    let store = store_named(photos);
    let server = ServerConfig::local(store.path()).env("CLIPFN_FACE_MODEL", folder).start();
    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let (status, body) = server.post_json("/v1/analyze", &json!({ "images": keys }));
    assert_eq!(status, 200, "{body}");
    body
}

fn floats(value: &Value) -> Vec<f32> {
    value.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect()
}

fn iou(a: &[f32], b: &[f32]) -> f32 {
    let w = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let h = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let area = |r: &[f32]| (r[2] - r[0]) * (r[3] - r[1]);
    w * h / (area(a) + area(b) - w * h)
}

/// A face's box and landmarks, flat.
fn points(face: &Value) -> Vec<f32> {
    let mut all = floats(&face["box"]);
    face["landmarks"].as_array().unwrap().iter().for_each(|p| all.extend(floats(p)));
    all
}

/// The largest difference between two faces' `points`.
fn farthest(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max)
}

/// How far a face with this box may be off: 2 px or 2% of its size.
fn allowance(bbox: &[f32]) -> f32 {
    2f32.max(0.02 * (bbox[2] - bbox[0]).max(bbox[3] - bbox[1]))
}

/// How our faces compare with the reference's, over many photos.
#[derive(Debug, Default)]
struct Agreement {
    reference: usize,
    ours: usize,
    /// Reference faces with one of ours over them (IoU at least 0.5).
    matched: usize,
    /// Of those, the faces whose box or landmarks are further than 2 px or 2% of the box's size,
    /// or whose embedding is under 0.98 in cosine to the reference's.
    off: usize,
    worst_score: f32,
    worst_cosine: f32,
}

impl Agreement {
    fn add(&mut self, ours: &[Value], theirs: &[Value]) {
        (self.reference, self.ours) = (self.reference + theirs.len(), self.ours + ours.len());
        for face in theirs {
            let bbox = floats(&face["box"]);
            let overlap = |mine: &&Value| iou(&floats(&mine["box"]), &bbox);
            let Some(mine) = ours.iter().max_by(|a, b| overlap(a).total_cmp(&overlap(b))) else { continue };
            if overlap(&mine) < 0.5 {
                continue;
            }
            self.matched += 1;
            let within = allowance(&bbox);
            let off = farthest(&points(mine), &points(face));
            let score = (mine["score"].as_f64().unwrap() - face["score"].as_f64().unwrap()).abs() as f32;
            self.worst_score = self.worst_score.max(score);
            let cosine = common::cosine(&floats(&mine["embedding"]), &floats(&face["embedding"]));
            self.worst_cosine = if self.matched == 1 { cosine } else { self.worst_cosine.min(cosine) };
            if off > within || cosine < 0.98 {
                self.off += 1;
                eprintln!("  a face of {:.0} px off by {off:.1} px, cosine {cosine:.4}", bbox[2] - bbox[0]);
            }
        }
    }
}

/// Camera photos (decoded at a DCT scale: larger than the canvas needs) and a small portrait in
/// its seven EXIF orientations, every face against the reference decoding as clipfn decodes
/// (`--draft`: the same DCT scale), then against the reference's full-size decode.
#[test]
fn faces_follow_the_reference_for_both_detector_formats() {
    let pillow = PathBuf::from(setup_var("CLIPFN_PILLOW_IMAGES_DIR"));
    let mut photos = camera_photos(8);
    photos.extend((2..=8).map(|o| pillow.join(format!("hopper_orientation_{o}.jpg"))));
    for (format, folder) in
        [("scrfd", setup_var("CLIPFN_TEST_FACES_SCRFD")), ("yunet", setup_var("CLIPFN_TEST_FACES_YUNET"))]
    {
        let body = analyze(&photos, &folder);
        let (same_decode, full_size) =
            (reference(&["detect", &folder, "--draft"], &photos, None), reference(&["detect", &folder], &photos, None));
        let (mut strict, mut loose) = (Agreement::default(), Agreement::default());
        for (i, photo) in photos.iter().enumerate() {
            let ours = body["data"][i]["faces"].as_array().unwrap_or_else(|| panic!("{format}: {}", body["data"][i]));
            let scores: Vec<f64> = ours.iter().map(|f| f["score"].as_f64().unwrap()).collect();
            assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{}: best first: {scores:?}", photo.display());
            let (width, height) =
                (same_decode[i]["width"].as_f64().unwrap(), same_decode[i]["height"].as_f64().unwrap());
            for face in ours {
                let b = floats(&face["box"]);
                let inside = b[0] >= 0.0 && b[1] >= 0.0 && b[2] as f64 <= width && b[3] as f64 <= height;
                assert!(inside, "{}: boxes are clipped to the photo: {b:?}", photo.display());
            }
            strict.add(ours, same_decode[i]["faces"].as_array().unwrap());
            loose.add(ours, full_size[i]["faces"].as_array().unwrap());
        }
        eprintln!("{format}: against the same decode {strict:?}; against the full-size decode {loose:?}");
        let none = body["data"].as_array().unwrap().iter().filter(|item| item["faces"] == json!([])).count();
        assert!(none >= 1, "{format}: a photo without faces answers \"faces\": []");
        assert!(strict.reference >= 20, "{format}: the generated detector should find faces ({strict:?})");
        // Every reference face; at most one in 50 more of ours (a score at the threshold, an IoU at
        // the suppression's limit, moved by the resizer's rounding).
        assert_eq!(strict.matched, strict.reference, "{format}: {strict:?}");
        assert!(strict.ours <= strict.reference + strict.reference / 50, "{format}: {strict:?}");
        // One face in 40 may be off: the generated detectors' regressions amplify the decoders'
        // and resizers' last-bit differences on fine texture (two YuNet faces of 91, side by side
        // on one photo: one 2.6 px off, the other's crop 1.5 px off and its cosine 0.95).
        assert!(strict.off <= strict.reference / 40, "{format}: {strict:?}");
        assert!(strict.worst_score <= 0.02, "{format}: {strict:?}");
        // A DCT-scaled decode moves some of these (fragile, generated) detectors' peaks by a cell.
        assert!(loose.matched as f32 >= 0.85 * loose.reference as f32, "{format}: {loose:?}");
    }
}

/// Photos drawn for the purpose (tools/draw_faces.py: four persons drawn as ellipses with their
/// looks, on a PNG, a 4000 x 3000 JPEG decoded at 1/4, a portrait in the eight EXIF orientations
/// with faces against its top and right edges, and a photo with none), with the drawn-face detectors of the
/// three formats (YOLOv5-face's on its centred grey canvas, with its own 0.6 minimum score): every face where it was drawn (box and landmarks within 2 px or 2% of its size), no
/// other, the box of the face against the edge clipped, the same faces as the reference's, and the
/// people exactly the persons.
#[test]
fn drawn_faces_are_found_where_they_were_drawn_and_people_are_the_persons() {
    let dir = tempfile::tempdir().unwrap();
    let drawn = python_json("draw_faces.py", &[dir.path().to_str().unwrap()], &[], None);
    let drawn = drawn.as_array().unwrap();
    let photos: Vec<PathBuf> = drawn.iter().map(|d| dir.path().join(d["file"].as_str().unwrap())).collect();
    let size = |photo: &Value| [photo["width"].as_f64().unwrap() as f32, photo["height"].as_f64().unwrap() as f32];
    // The drawn box, clipped to the photo as the answer's must be.
    let clipped = |face: &Value, [width, height]: [f32; 2]| {
        let mut points = points(face);
        for (v, limit) in points.iter_mut().zip([width, height, width, height]) {
            *v = v.clamp(0.0, limit);
        }
        points
    };
    let reaches_out =
        drawn.iter().any(|p| p["faces"].as_array().unwrap().iter().any(|f| clipped(f, size(p)) != points(f)));
    assert!(reaches_out, "a face drawn against the photo's edge has a box that reaches out");
    for (format, folder) in [
        ("scrfd", setup_var("CLIPFN_TEST_FACES_SCRFD_DRAWN")),
        ("yunet", setup_var("CLIPFN_TEST_FACES_YUNET_DRAWN")),
        ("yolov5_face", setup_var("CLIPFN_TEST_FACES_YOLOV5_FACE_DRAWN")),
    ] {
        let body = analyze(&photos, &folder);
        // [photo, face] in the answer -> the person drawn there
        let mut drawn_as = std::collections::HashMap::new();
        let mut worst = 0f32;
        for (i, photo) in drawn.iter().enumerate() {
            let ours = body["data"][i]["faces"].as_array().unwrap_or_else(|| panic!("{format}: {}", body["data"][i]));
            let theirs = photo["faces"].as_array().unwrap();
            assert_eq!(ours.len(), theirs.len(), "{format}, {}: {ours:?}", photo["file"]);
            for face in theirs {
                let expected = clipped(face, size(photo));
                let off = |mine: &Value| farthest(&points(mine), &expected);
                let (index, mine) = ours.iter().enumerate().min_by(|a, b| off(a.1).total_cmp(&off(b.1))).unwrap();
                let within = allowance(&expected[..4]);
                worst = worst.max(off(mine) / within);
                assert!(off(mine) <= within, "{format}, {}: drawn {face}, found {mine}", photo["file"]);
                assert!(mine["score"].as_f64().unwrap() >= 0.7, "{mine}");
                drawn_as.insert(json!([i, index]), face["person"].as_u64().unwrap());
            }
        }
        eprintln!("{format}: the worst face is at {worst:.2} of its allowance");
        // One person per person drawn, holding exactly its faces.
        let people = body["album"]["people"].as_array().unwrap();
        let persons: std::collections::BTreeSet<u64> = drawn_as.values().copied().collect();
        assert_eq!(people.len(), persons.len(), "{format}: {people:?}");
        for person in people {
            let faces = person["faces"].as_array().unwrap();
            let who = drawn_as[&faces[0]];
            let all = drawn_as.values().filter(|&&p| p == who).count();
            assert!(faces.iter().all(|f| drawn_as[f] == who) && faces.len() == all, "{format}: person {who}: {person}");
        }
        let same_decode = reference(&["detect", &folder, "--draft"], &photos, None);
        let mut agreement = Agreement::default();
        for (i, theirs) in same_decode.as_array().unwrap().iter().enumerate() {
            agreement.add(body["data"][i]["faces"].as_array().unwrap(), theirs["faces"].as_array().unwrap());
        }
        eprintln!("{format}: against the reference {agreement:?}");
        let exact = agreement.matched == agreement.reference && agreement.ours == agreement.reference;
        assert!(exact && agreement.off == 0 && agreement.worst_score <= 0.001, "{format}: {agreement:?}");
    }
}

/// A photo and its 70% copy: their faces are the same people, and the people are scikit-learn's
/// DBSCAN on the answer's own face embeddings.
#[test]
fn people_are_dbscans_and_a_copys_faces_join_their_originals() {
    let photos = camera_photos(4);
    let dir = tempfile::tempdir().unwrap();
    let copies = resized_jpegs(&photos, dir.path(), "small-", 92, |w, h| (w * 7 / 10, h * 7 / 10));
    let all: Vec<PathBuf> = photos.iter().chain(&copies).cloned().collect();
    let body = analyze(&all, &setup_var("CLIPFN_TEST_FACES_SCRFD"));
    let mut faces = Vec::new();
    let mut embeddings = Vec::new();
    for (photo, item) in body["data"].as_array().unwrap().iter().enumerate() {
        for (face, value) in item["faces"].as_array().unwrap().iter().enumerate() {
            faces.push([photo, face]);
            embeddings.push(value["embedding"].clone());
        }
    }
    assert!(faces.len() >= 4, "{faces:?}");
    let photo_of_face: Vec<usize> = faces.iter().map(|[photo, _]| *photo).collect();
    let asked = json!({ "embeddings": embeddings, "photos": photo_of_face });
    let labels = reference(&["people", "--eps", "0.5", "--min-samples", "2"], &[], Some(&asked));
    let labels: Vec<i64> = labels["labels"].as_array().unwrap().iter().map(|l| l.as_i64().unwrap()).collect();
    let people = body["album"]["people"].as_array().unwrap();
    let person_of =
        |face: [usize; 2]| people.iter().position(|p| p["faces"].as_array().unwrap().iter().any(|f| f == &json!(face)));
    // The same partition: two faces share a person exactly when scikit-learn's DBSCAN, with no
    // photo twice in a group, gives them one label.
    for (a, fa) in faces.iter().enumerate() {
        assert_eq!(person_of(*fa).is_none(), labels[a] == -1, "{fa:?}: {labels:?}");
        for (b, fb) in faces.iter().enumerate() {
            let same_label = labels[a] != -1 && labels[a] == labels[b];
            assert_eq!(person_of(*fa).is_some() && person_of(*fa) == person_of(*fb), same_label, "{fa:?} {fb:?}");
        }
    }
    let sizes: Vec<usize> = people.iter().map(|p| p["faces"].as_array().unwrap().len()).collect();
    assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "largest first: {sizes:?}");
    for person in people {
        assert!(person["faces"].as_array().unwrap().contains(&person["representative"]), "{person}");
    }
    // Each original's best face finds its copy's best face in the same person.
    let n = photos.len();
    for i in 0..n {
        if body["data"][i]["faces"].as_array().unwrap().is_empty() {
            continue;
        }
        assert!(person_of([i, 0]).is_some() && person_of([i, 0]) == person_of([i + n, 0]), "photo {i}: {people:?}");
    }
}

#[test]
fn faces_can_be_left_out_and_bad_face_models_stop_start_up_naming_the_file() {
    let photos = camera_photos(2);
    let store = store_named(&photos);
    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let folder = setup_var("CLIPFN_TEST_FACES_YUNET");
    let server = ServerConfig::local(store.path()).env("CLIPFN_FACE_MODEL", &folder).start();
    let (_, without) = server.post_json("/v1/analyze", &json!({ "images": keys, "faces": false }));
    assert!(without["data"][0].get("faces").is_none() && without["album"].get("people").is_none(), "{without}");
    let ready = server.get("/readyz").1;
    assert_eq!(ready["faces"]["detector"]["format"], "yunet", "{ready}");
    assert_eq!(ready["faces"]["recognizer"]["dim"], 512, "{ready}");

    let plain = ServerConfig::local(store.path()).start();
    let (status, answer) = plain.post_json("/v1/analyze", &json!({ "images": keys, "faces": true }));
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("CLIPFN_FACE_MODEL"), "{answer}");

    for (bad, part, says) in [
        (setup_var("CLIPFN_TEST_FACE_DETECTOR_BAD"), "detection", "no detector format"),
        (setup_var("CLIPFN_TEST_FACE_RECOGNIZER_BAD"), "recognition", "112"),
    ] {
        let broken = tempfile::tempdir().unwrap();
        for other in ["detection", "recognition"] {
            let from =
                if other == part { PathBuf::from(&bad) } else { Path::new(&folder).join(other).join("model.onnx") };
            std::fs::create_dir(broken.path().join(other)).unwrap();
            std::fs::copy(from, broken.path().join(other).join("model.onnx")).unwrap();
        }
        let stderr = common::failed_start(&[("CLIPFN_FACE_MODEL", broken.path().to_str().unwrap())]);
        let file = broken.path().join(part).join("model.onnx");
        assert!(stderr.contains(file.to_str().unwrap()) && stderr.contains(says), "{part}: {stderr}");
    }
}

/// A noise photo passes the score threshold everywhere: its faces are capped at CLIPFN_MAX_FACES,
/// the best kept, and the answer says how many were left out.
#[test]
fn a_noise_photo_is_capped_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let noise = image::RgbImage::from_fn(640, 480, |_, _| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        image::Rgb([state as u8, (state >> 8) as u8, (state >> 16) as u8])
    });
    noise.save(dir.path().join("noise.png")).unwrap();
    let server = ServerConfig::local(dir.path())
        .env("CLIPFN_FACE_MODEL", &setup_var("CLIPFN_TEST_FACES_SCRFD"))
        .env("CLIPFN_FACE_MIN_SCORE", "0.05")
        .env("CLIPFN_MAX_FACES", "3")
        .start();
    let (status, body) = server.post_json("/v1/analyze", &json!({ "images": ["noise.png"] }));
    assert_eq!(status, 200, "{body}");
    let item = &body["data"][0];
    assert_eq!(item["faces"].as_array().unwrap().len(), 3, "{item}");
    assert!(item["faces_left_out"].as_u64().unwrap() > 0, "{item}");
}

/// dlib's recognizer with its real weights (face-api 1.7.15's, rebuilt by
/// tools/setup-real-faces.sh; tools/dlib_parity.py holds it to face-api's own pipeline): clipfn
/// cuts 150 x 150 chips on dlib's template and feeds them raw, as the reference does, on the
/// generated SCRFD's candidates on camera photos. ArcFace's template scaled to 150 px would give
/// other embeddings, so the check can tell the chips apart.
#[test]
fn a_dlib_recognizer_gets_dlibs_chips() {
    let photos = camera_photos(6);
    let folder = tempfile::tempdir().unwrap();
    for (part, model) in [
        ("detection", Path::new(&setup_var("CLIPFN_TEST_FACES_SCRFD")).join("detection/model.onnx")),
        ("recognition", PathBuf::from(setup_var("CLIPFN_TEST_DLIB_RECOGNIZER"))),
    ] {
        std::fs::create_dir(folder.path().join(part)).unwrap();
        std::os::unix::fs::symlink(model, folder.path().join(part).join("model.onnx")).unwrap();
    }
    let folder = folder.path().to_str().unwrap();
    let store = store_named(&photos);
    let server = ServerConfig::local(store.path()).env("CLIPFN_FACE_MODEL", folder).start();
    let recognizer = server.get("/readyz").1["faces"]["recognizer"].clone();
    assert_eq!((&recognizer["format"], &recognizer["dim"]), (&json!("dlib"), &json!(128)), "{recognizer}");
    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let (status, body) = server.post_json("/v1/analyze", &json!({ "images": keys }));
    assert_eq!(status, 200, "{body}");
    let dlib = reference(&["detect", folder, "--draft"], &photos, None);
    let arcface = reference(&["detect", folder, "--draft", "--arcface-template"], &photos, None);
    let (mut agreement, mut wrong_chip) = (Agreement::default(), Agreement::default());
    for (i, photo) in photos.iter().enumerate() {
        let ours = body["data"][i]["faces"].as_array().unwrap_or_else(|| panic!("{}", photo.display()));
        agreement.add(ours, dlib[i]["faces"].as_array().unwrap());
        wrong_chip.add(ours, arcface[i]["faces"].as_array().unwrap());
    }
    eprintln!("dlib chips: {agreement:?}; against ArcFace's template: {wrong_chip:?}");
    assert!(agreement.reference >= 10, "the generated detector should find candidates ({agreement:?})");
    assert_eq!(agreement.matched, agreement.reference, "{agreement:?}");
    assert!(agreement.off <= agreement.reference / 40 && agreement.worst_cosine >= 0.98, "{agreement:?}");
    assert!(wrong_chip.worst_cosine < 0.98, "ArcFace's template gives the same embeddings: {wrong_chip:?}");
}

/// People across albums with drawn faces (issue 38): the first album's people, sent back with their
/// exemplars as `known_people`, name the same persons in the next album; a person not sent back
/// gets no id (and is the person it is without `known_people`); two faces of one person in one
/// photo are never one person, known or new; a request naming another recognizer is refused.
/// (The bridge case, a face that leaves having joined two parts, is src/album/people.rs's.)
#[test]
fn known_people_name_drawn_faces_and_a_photo_never_shows_one_person_twice() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let mut drawn: Vec<Value> = python_json("draw_faces.py", &[out], &[], None).as_array().unwrap().clone();
    drawn.extend(python_json("draw_faces.py", &[out, "twins"], &[], None).as_array().unwrap().iter().cloned());
    let photo = |name: &str| drawn.iter().find(|p| p["file"] == name).unwrap().clone();
    let first = [photo("drawn-row.png"), photo("drawn-large.jpg")];
    let second = [photo("drawn-turned-1.jpg"), photo("drawn-turned-6.jpg"), photo("drawn-twins.png")];
    let path = |p: &Value| dir.path().join(p["file"].as_str().unwrap());
    let store = store_named(&first.iter().chain(&second).map(path).collect::<Vec<_>>());
    let server =
        ServerConfig::local(store.path()).env("CLIPFN_FACE_MODEL", &setup_var("CLIPFN_TEST_FACES_SCRFD_DRAWN")).start();
    let keys = |photos: &[Value]| photos.iter().map(|p| p["file"].clone()).collect::<Vec<_>>();
    // The person drawn where a face was found: the drawn box it overlaps most.
    let drawn_person = |photos: &[Value], face: &Value, answer: &Value| {
        let [i, j] = [face[0].as_u64().unwrap() as usize, face[1].as_u64().unwrap() as usize];
        let found = floats(&answer["data"][i]["faces"][j]["box"]);
        let theirs = photos[i]["faces"].as_array().unwrap();
        let overlap = |d: &&Value| iou(&floats(&d["box"]), &found);
        let best = theirs.iter().max_by(|a, b| overlap(a).total_cmp(&overlap(b))).unwrap();
        assert!(overlap(&best) >= 0.5, "{face}: {found:?} is no drawn face");
        best["person"].as_u64().unwrap()
    };

    let (status, album) = server.post_json("/v1/analyze", &json!({ "images": keys(&first) }));
    assert_eq!(status, 200, "{album}");
    let recognizer = album["data"][0]["faces"][0]["recognizer"].clone();
    // Persons 0, 1 and 2 are known from here on; person 3 is not sent back.
    let mut known = Vec::new();
    for person in album["album"]["people"].as_array().unwrap() {
        let who = drawn_person(&first, &person["faces"][0], &album);
        if who == 3 {
            continue;
        }
        let embedding = |f: &Value| {
            album["data"][f[0].as_u64().unwrap() as usize]["faces"][f[1].as_u64().unwrap() as usize]["embedding"]
                .clone()
        };
        let exemplars: Vec<Value> = person["exemplars"].as_array().unwrap().iter().map(embedding).collect();
        known.push(json!({ "id": format!("p-{who}"), "embeddings": exemplars }));
    }
    assert_eq!(known.len(), 3, "{}", album["album"]);

    let request = json!({ "images": keys(&second), "known_people": known, "recognizer": recognizer });
    let (status, next) = server.post_json("/v1/analyze", &request);
    assert_eq!(status, 200, "{next}");
    let people = next["album"]["people"].as_array().unwrap();
    let twins = 2;
    let mut new_person_of_3 = None;
    for person in people {
        let faces = person["faces"].as_array().unwrap();
        let persons: Vec<u64> = faces.iter().map(|f| drawn_person(&second, f, &next)).collect();
        assert!(persons.windows(2).all(|w| w[0] == w[1]), "one answer person holds two drawn ones: {person}");
        let photos: Vec<&Value> = faces.iter().map(|f| &f[0]).collect();
        assert!(!(1..photos.len()).any(|k| photos[k..].contains(&photos[k - 1])), "one photo twice: {person}");
        match person["id"].as_str() {
            Some(id) => assert_eq!(id, format!("p-{}", persons[0]), "{person}"),
            None => {
                assert_eq!(persons[0], 3, "a known person's face went unnamed: {person}");
                new_person_of_3 = Some(faces.clone());
            }
        }
    }
    // Each known person in the album is named on every photo showing it, once a photo.
    for (who, photos) in [(0, 3), (2, 2)] {
        let named =
            people.iter().find(|p| p["id"] == format!("p-{who}")).unwrap_or_else(|| panic!("{}", next["album"]));
        assert_eq!(named["faces"].as_array().unwrap().len(), photos, "p-{who}: {named}");
    }
    assert!(people.iter().all(|p| p["id"] != "p-1"), "person 1 is not in this album: {}", next["album"]);
    assert_eq!(next["album"]["unsure"], json!([]), "{}", next["album"]);
    // Person 3, unknown: a new person of its three photos, the same one a call without known
    // people gives; its second face in the twins photo is someone else or no one.
    let new = new_person_of_3.unwrap_or_else(|| panic!("person 3 is nobody: {}", next["album"]));
    assert_eq!(new.len(), 3, "{new:?}");
    assert_eq!(new.iter().filter(|f| f[0] == twins).count(), 1, "{new:?}");
    let (status, alone) = server.post_json("/v1/analyze", &json!({ "images": keys(&second) }));
    assert_eq!(status, 200, "{alone}");
    let of_3 = alone["album"]["people"].as_array().unwrap().iter().find(|p| p["faces"].as_array() == Some(&new));
    assert!(of_3.is_some(), "without known people person 3 is another: {}", alone["album"]);

    // Bad known people, each refused naming it: an empty person, a 10 kB id, 10^5 exemplars (one
    // person over CLIPFN_MAX_EXEMPLARS; 1,001 people over CLIPFN_MAX_KNOWN_PEOPLE), bad vectors
    // (below); an id given twice is one person, with the embeddings of both.
    let exemplar = known[0]["embeddings"][0].clone();
    let with_known = |people: Value| json!({ "images": keys(&second), "known_people": people });
    let refusals = [
        (json!([{ "id": "p-0", "embeddings": [] }]), "known_people[0].embeddings must hold 1 to 20"),
        (json!([{ "id": "p".repeat(10_000), "embeddings": [exemplar] }]), "known_people[0].id must be 1 to 256"),
        (json!([{ "id": "p-0", "embeddings": vec![[0.5]; 100_000] }]), "got 100000"),
        (json!(vec![json!({ "id": "p", "embeddings": [[0.5]] }); 1001]), "over the limit of 1000"),
    ];
    // Bad vectors, each named by its person and place: one short of the recognizer's dim, one
    // holding 1e39 (a finite JSON number past f32::MAX, which serde reads as an infinite float32),
    // one all zeros; the good exemplar before each, so that the index named is the bad one's.
    let dim = exemplar.as_array().unwrap().len();
    let mut short = exemplar.clone();
    short.as_array_mut().unwrap().pop();
    let mut huge = exemplar.clone();
    huge[7] = json!(1e39);
    let one =
        |bad: Value| json!([{ "id": "p-0", "embeddings": [exemplar] }, { "id": "p-1", "embeddings": [exemplar, bad] }]);
    let bad_vectors = [
        (one(short), format!("known_people[1].embeddings[1] has {} values, and this recognizer's", dim - 1)),
        (one(huge), "known_people[1].embeddings[1] holds a value that is not a finite float32".to_string()),
        (one(json!(vec![0.0; dim])), "known_people[1].embeddings[1] is all zeros".to_string()),
    ];
    let refusals = refusals.into_iter().map(|(people, names)| (people, names.to_string())).chain(bad_vectors);
    for (people, names) in refusals {
        let (status, answer) = server.post_json("/v1/analyze", &with_known(people));
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(status == 400 && message.contains(&names), "{names}: {status} {answer}");
    }
    // 1e309 is past f64's range too: serde_json refuses the number while it parses the body, before
    // any field is known, so the 400 names its place in the text (a line and a column), not the
    // field. (JSON has no NaN or Infinity to send.)
    let mut marked = exemplar.clone();
    marked[7] = json!(0.123456789);
    let text = with_known(one(marked)).to_string();
    assert_eq!(text.matches("0.123456789").count(), 1);
    let text = text.replace("0.123456789", "1e309");
    let (status, answer) = server.post_raw("/v1/analyze", text.into_bytes());
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(status == 400 && message.contains("number out of range"), "1e309: {status} {answer}");
    let id = &known[0]["id"];
    let twice = json!([{ "id": id, "embeddings": [exemplar] }, { "id": id, "embeddings": known[0]["embeddings"] }]);
    let (status, answer) = server.post_json("/v1/analyze", &with_known(twice));
    assert_eq!(status, 200, "{answer}");
    let named: Vec<&Value> = answer["album"]["people"].as_array().unwrap().iter().filter(|p| &p["id"] == id).collect();
    assert_eq!(named.len(), 1, "an id given twice is one person: {}", answer["album"]);

    // Another recognizer's id is refused, with known people and without.
    for mut body in [request.clone(), json!({ "images": keys(&second) })] {
        body["recognizer"] = json!("arcface:0123456789abcdef:chips-3");
        let (status, answer) = server.post_json("/v1/analyze", &body);
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(status == 400 && message.contains("arcface:0123456789abcdef"), "{answer}");
    }
}

/// `list` in the order of its faces.
fn sorted_by_face<T>(mut list: Vec<(Value, T)>) -> Vec<(Value, T)> {
    list.sort_by_key(|(face, _)| face.to_string());
    list
}

/// Each known person's distance (cosine) from `vector`: to that person's nearest exemplar, as
/// README defines it.
fn known_distances(vector: &[f32], known: &[(String, Vec<Vec<f32>>)]) -> Vec<f32> {
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    known
        .iter()
        .map(|(_, exemplars)| exemplars.iter().map(|e| 1.0 - dot(vector, e)).fold(f32::INFINITY, f32::min))
        .collect()
}

/// `album.unsure` and `maybe` over HTTP on drawn faces, each held to README's rule recomputed here
/// from the answer's own face embeddings and the exemplars sent: a person of the first album sent
/// twice, under two ids, leaves each of its faces in the next album about equally near both, so
/// those faces are `unsure` between the two and name no one; another known person still names its
/// own; every new person whose centre is within CLIPFN_FACE_SUGGEST_DISTANCE of a known person is
/// `maybe` the nearest, with that distance, and one beyond it is not.
#[test]
fn unsure_faces_and_suggestions_follow_their_rules_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    python_json("draw_faces.py", &[out], &[], None);
    python_json("draw_faces.py", &[out, "twins"], &[], None);
    let first = ["drawn-row.png", "drawn-large.jpg"];
    let second = ["drawn-turned-1.jpg", "drawn-turned-6.jpg", "drawn-twins.png"];
    let store = store_named(&first.iter().chain(&second).map(|name| dir.path().join(name)).collect::<Vec<_>>());
    let folder = setup_var("CLIPFN_TEST_FACES_SCRFD_DRAWN");
    let start = |suggest: &str| {
        ServerConfig::local(store.path())
            .env("CLIPFN_FACE_MODEL", &folder)
            .env("CLIPFN_FACE_SUGGEST_DISTANCE", suggest)
            .start()
    };
    // Every new person is within 2, the farthest a cosine distance goes: each gets its `maybe`.
    let server = start("2");
    let max_distance = server.get("/readyz").1["faces"]["max_distance"].as_f64().unwrap() as f32;
    let (status, album) = server.post_json("/v1/analyze", &json!({ "images": first }));
    assert_eq!(status, 200, "{album}");
    let face_embedding = |answer: &Value, f: &Value| {
        floats(&answer["data"][f[0].as_u64().unwrap() as usize]["faces"][f[1].as_u64().unwrap() as usize]["embedding"])
    };
    let persons: Vec<Vec<Vec<f32>>> = album["album"]["people"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["exemplars"].as_array().unwrap().iter().map(|f| face_embedding(&album, f)).collect())
        .collect();
    assert_eq!(persons.len(), 4, "{}", album["album"]);

    // The next album's faces, and which first-album persons reach them.
    let (status, plain) = server.post_json("/v1/analyze", &json!({ "images": second }));
    assert_eq!(status, 200, "{plain}");
    let mut plain_faces: Vec<Vec<f32>> = Vec::new();
    for (i, item) in plain["data"].as_array().unwrap().iter().enumerate() {
        let count = item["faces"].as_array().unwrap().len();
        plain_faces.extend((0..count).map(|j| face_embedding(&plain, &json!([i, j]))));
    }
    let everyone: Vec<(String, Vec<Vec<f32>>)> =
        persons.iter().enumerate().map(|(k, e)| (format!("{k}"), e.clone())).collect();
    let reached = |k: usize| plain_faces.iter().filter(|e| known_distances(e, &everyone)[k] <= max_distance).count();
    let mut in_next: Vec<usize> = (0..persons.len()).filter(|&k| reached(k) > 0).collect();
    in_next.sort_by_key(|&k| std::cmp::Reverse(reached(k)));
    assert!(in_next.len() >= 2, "persons 0, 2 and 3 are drawn in both albums: {in_next:?}");
    // `a` twice, under two ids, and `b`.
    let (a, b) = (&persons[in_next[0]], &persons[in_next[1]]);
    let known = vec![("a".to_string(), a.clone()), ("a-again".to_string(), a.clone()), ("b".to_string(), b.clone())];
    let known_json: Vec<Value> = known.iter().map(|(id, e)| json!({ "id": id, "embeddings": e })).collect();
    let recognizer = album["data"][0]["faces"][0]["recognizer"].clone();
    let request = json!({ "images": second, "known_people": known_json, "recognizer": recognizer });
    let (status, next) = server.post_json("/v1/analyze", &request);
    assert_eq!(status, 200, "{next}");
    // The rules below are recomputed on this answer's own faces.
    let mut faces: Vec<(Value, Vec<f32>)> = Vec::new();
    for (i, item) in next["data"].as_array().unwrap().iter().enumerate() {
        let count = item["faces"].as_array().unwrap().len();
        assert_eq!(count, plain["data"][i]["faces"].as_array().unwrap().len(), "known people change no face");
        faces.extend((0..count).map(|j| (json!([i, j]), face_embedding(&next, &json!([i, j])))));
    }

    // README's rule for each face: its nearest known person within the joining distance names it,
    // unless the second nearest is within a tenth of that distance of it (unsure); of one photo's
    // faces a known person would take, the nearest.
    let margin = max_distance / 10.0;
    // (face, the two ids) and (face, known person, distance)
    let mut unsure: Vec<(Value, Vec<&str>)> = Vec::new();
    let mut claimed: Vec<(Value, usize, f32)> = Vec::new();
    for (face, embedding) in &faces {
        let distances = known_distances(embedding, &known);
        let mut order: Vec<usize> = (0..known.len()).collect();
        order.sort_by(|&x, &y| distances[x].total_cmp(&distances[y]));
        let (first, second) = (order[0], order[1]);
        if distances[first] <= max_distance && distances[second] - distances[first] < margin {
            let mut between = vec![known[first].0.as_str(), known[second].0.as_str()];
            between.sort_unstable();
            unsure.push((face.clone(), between));
        } else if distances[first] <= max_distance {
            claimed.push((face.clone(), first, distances[first]));
        }
    }
    let mut named_b: Vec<Value> = claimed
        .iter()
        .filter(|(face, person, d)| {
            *person == 2 && !claimed.iter().any(|(f, p, e)| f[0] == face[0] && f != face && *p == 2 && e < d)
        })
        .map(|(face, _, _)| face.clone())
        .collect();
    named_b.sort_by_key(|f| f.to_string());
    assert!(claimed.iter().all(|(_, person, _)| *person == 2), "a face nearer `a` than `a-again` by the margin");
    assert!(!unsure.is_empty() && !named_b.is_empty(), "unsure {unsure:?}, named b {named_b:?}");

    let answered_unsure: Vec<(Value, Vec<&str>)> = next["album"]["unsure"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            let mut between: Vec<&str> =
                u["between"].as_array().unwrap().iter().map(|id| id.as_str().unwrap()).collect();
            between.sort_unstable();
            (u["face"].clone(), between)
        })
        .collect();
    assert_eq!(sorted_by_face(answered_unsure), sorted_by_face(unsure.clone()), "{}", next["album"]);
    let people = next["album"]["people"].as_array().unwrap();
    let ids: Vec<&Value> = people.iter().filter_map(|p| p.get("id")).collect();
    assert_eq!(ids, [&json!("b")], "an unsure face names no one: {}", next["album"]);
    let mut b_faces = people[0]["faces"].as_array().unwrap().clone();
    b_faces.sort_by_key(|f| f.to_string());
    assert_eq!(b_faces, named_b, "{}", next["album"]);

    // Unsure faces go on as unknown: they are clustered with the rest, into new people. Each new
    // person's `maybe` is the known person nearest its centre (the normalised sum of its faces),
    // at that distance; `a` and `a-again` are the same person, so either may be named.
    let mut suggestions = Vec::new();
    for person in people.iter().filter(|p| p.get("id").is_none()) {
        let mut centre = vec![0f32; a[0].len()];
        for face in person["faces"].as_array().unwrap() {
            centre.iter_mut().zip(face_embedding(&next, face)).for_each(|(c, x)| *c += x);
        }
        let norm = centre.iter().map(|x| x * x).sum::<f32>().sqrt();
        centre.iter_mut().for_each(|x| *x /= norm);
        let distances = known_distances(&centre, &known);
        let nearest = distances.iter().copied().fold(f32::INFINITY, f32::min);
        let maybe = person.get("maybe").unwrap_or_else(|| panic!("within 2 of everyone, and no maybe: {person}"));
        let k = known.iter().position(|(id, _)| maybe["id"] == id.as_str()).unwrap();
        assert!(distances[k] - nearest <= 1e-5, "{person}: nearest at {nearest}, {distances:?}");
        assert!((maybe["distance"].as_f64().unwrap() as f32 - nearest).abs() <= 1e-4, "{person}: {distances:?}");
        suggestions.push((person["faces"].clone(), nearest));
    }
    let holds_unsure = |faces: &Value| unsure.iter().any(|(u, _)| faces.as_array().unwrap().contains(u));
    let a_again = suggestions.iter().any(|(faces, _)| holds_unsure(faces));
    assert!(a_again, "the unsure faces joined no new person: {}", next["album"]);

    // Within a reach that only some new people's centres are in (halfway between the nearest two
    // distinct distances; or under all of them), only those are `maybe` anyone.
    let mut distances: Vec<f32> = suggestions.iter().map(|(_, d)| *d).collect();
    distances.sort_by(f32::total_cmp);
    distances.dedup_by(|x, y| (*x - *y).abs() < 1e-3);
    let reach = match distances[..] {
        [nearest, next_one, ..] => (nearest + next_one) / 2.0,
        [nearest] => nearest / 2.0,
        [] => unreachable!("the unsure faces make a new person"),
    };
    eprintln!("unsure {unsure:?}; b names {named_b:?}; new people's centres at {suggestions:?}; reach {reach}");
    let narrower = start(&reach.to_string());
    let (status, answer) = narrower.post_json("/v1/analyze", &request);
    assert_eq!(status, 200, "{answer}");
    let new: Vec<&Value> =
        answer["album"]["people"].as_array().unwrap().iter().filter(|p| p.get("id").is_none()).collect();
    assert_eq!(new.len(), suggestions.len(), "{}", answer["album"]);
    for (faces, distance) in &suggestions {
        let person =
            new.iter().find(|p| &p["faces"] == faces).unwrap_or_else(|| panic!("{faces}: {}", answer["album"]));
        assert_eq!(person.get("maybe").is_some(), *distance <= reach, "reach {reach}, centre at {distance}: {person}");
    }
}
