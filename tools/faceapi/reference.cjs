#!/usr/bin/env node
// face-api's own FaceRecognitionNet on pre-cropped 150x150 RGB chips: the reference that
// tools/dlib_parity.py holds the rebuilt ONNX recognizer to.
//
//   node tools/faceapi/reference.cjs --model DIR --chips FILE --n N [--modules DIR] [--backend cpu]
//
// --model    a folder with face_recognition_model-weights_manifest.json and its .bin
// --chips    raw little-endian float32 [N, 150, 150, 3] (HWC, RGB, values 0-255)
// --modules  the node_modules that tools/setup-real-faces.sh installed from tools/faceapi's
//            lockfile (default: .cache/node/node_modules beside this repository's tools/)
// --backend  a tfjs backend; default cpu (plain JavaScript: no native build, no download)
//
// Prints one JSON object on stdout: versions, backend and "descriptors", N arrays of 128 numbers
// (face-api's computeFaceDescriptor: its own input handling, mean (122.782, 117.001, 104.298),
// division by 255, not L2-normalised). Anything the libraries log goes to stderr.
'use strict';

const fs = require('fs');
const path = require('path');

const SIZE = 150;

function args(argv) {
  const a = { modules: path.join(__dirname, '..', '..', '.cache', 'node', 'node_modules'), backend: 'cpu' };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '');
    if (!['model', 'chips', 'n', 'modules', 'backend'].includes(k) || argv[i + 1] === undefined) {
      throw new Error(`usage: reference.cjs --model DIR --chips FILE --n N [--modules DIR] [--backend cpu]; bad ${argv[i]}`);
    }
    a[k] = argv[i + 1];
  }
  if (!a.model || !a.chips || !a.n) throw new Error('--model, --chips and --n are required');
  return a;
}

async function main() {
  const a = args(process.argv.slice(2));
  const log = (...m) => process.stderr.write(`${m.join(' ')}\n`);
  console.log = log; // tfjs and face-api print notices; stdout carries the JSON only
  console.info = log;
  // face-api's node build without bundled tfjs: it requires @tensorflow/tfjs (whose CPU backend
  // runs here) and @tensorflow/tfjs-backend-wasm, both from the lockfile's node_modules
  const entry = require.resolve('@vladmandic/face-api/dist/face-api.node-wasm.js', { paths: [a.modules] });
  const faceapi = require(entry);
  const { tf } = faceapi;
  await tf.setBackend(a.backend);
  await tf.ready();

  const n = Number(a.n);
  const buf = fs.readFileSync(a.chips);
  const per = SIZE * SIZE * 3;
  if (!Number.isInteger(n) || n < 1 || buf.length !== n * per * 4) {
    throw new Error(`${a.chips}: ${buf.length} bytes, not ${n} x 150 x 150 x 3 float32`);
  }
  const all = new Float32Array(buf.buffer, buf.byteOffset, n * per);

  const net = faceapi.nets.faceRecognitionNet;
  await net.loadFromDisk(a.model);
  const chips = [];
  for (let i = 0; i < n; i += 1) chips.push(tf.tensor3d(all.slice(i * per, (i + 1) * per), [SIZE, SIZE, 3], 'float32'));
  // a batch: face-api's NetInput stacks the chips (150 x 150 already: no padding, no resize)
  let out = await net.computeFaceDescriptor(chips);
  if (!Array.isArray(out)) out = [out];
  tf.dispose(chips);
  const pkg = JSON.parse(fs.readFileSync(path.join(path.dirname(entry), '..', 'package.json'), 'utf8'));
  process.stdout.write(`${JSON.stringify({
    faceapi: pkg.version, tfjs: tf.version_core, backend: tf.getBackend(), n,
    descriptors: out.map((d) => Array.from(d)),
  })}\n`);
}

main().catch((e) => {
  process.stderr.write(`reference.cjs: ${e.stack || e}\n`);
  process.exit(1);
});
