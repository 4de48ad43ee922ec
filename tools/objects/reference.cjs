#!/usr/bin/env node
// Human's own CenterNet object detector under plain node: the reference that tools/objects_parity.py
// holds the converted ONNX model (.cache/models/objects-centernet/model.onnx) to.
//
//   node tools/objects/reference.cjs --model DIR --photos FILE --mode detect|raw [--out DIR]
//                                    [--modules DIR]
//
// --model    the folder with Human's centernet.json and centernet.bin
// --photos   a JSON list; each entry {"name", "rgb": FILE, "width": W, "height": H} (raw uint8 RGB,
//            H x W x 3, row-major: the photo as decoded by the caller, so JS and Python see the
//            same pixels, no decoder of their own) or, in raw mode, {"name", "input": FILE} (raw
//            little-endian float32 [1, 512, 512, 3]: a model input as it is)
// --mode     detect: Human 3.3.6 itself (dist/human.node-wasm.js, its tfjs backend-wasm import
//            pointed at @tensorflow/tfjs-backend-cpu) runs human.detect() on each photo as an
//            int32 [H, W, 3] tensor (tf.node.decodeImage's type; Human's image.process expands
//            and casts it to the float32 [1, H, W, 3] of 0-255 that its node demo passes itself);
//            object detection alone, Human's defaults otherwise (minConfidence 0.2,
//            iouThreshold 0.4, maxDetected 10) except that its frame cache is off
//            (cacheSensitivity 0, object.skipFrames 0, skipTime 0: stills, not video). Prints
//            {"photos": [{"name", "width", "height", "objects": [Human's ObjectResult: id, score,
//            class, label, box, boxRaw]}]}.
//            raw: tfjs-converter's GraphModel from the same files; an "rgb" photo is first resized
//            the way src/object/centernet.ts resizes it (tf.image.resizeBilinear to 512 x 512,
//            align_corners and half_pixel_centers false); the 512 input and the three outputs
//            (tower_0/detections, tower_0/keypoints, tower_0/wh) go to --out as raw float32
//            (<i>.input.f32, <i>.detections.f32, ...); prints their names and shapes.
// --modules  the node_modules that tools/setup-objects.sh installed from tools/objects' lockfile
//            (default: .cache/node-objects/node_modules beside this repository's tools/)
//
// Plain JavaScript kernels only (tfjs-backend-cpu): no native build, no download. Anything the
// libraries log goes to stderr; stdout carries the JSON only.
'use strict';

const fs = require('fs');
const path = require('path');
const Module = require('module');

const OUTPUTS = ['tower_0/detections', 'tower_0/keypoints', 'tower_0/wh'];

function args(argv) {
  const a = { modules: path.join(__dirname, '..', '..', '.cache', 'node-objects', 'node_modules') };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '');
    if (!['model', 'photos', 'mode', 'out', 'modules'].includes(k) || argv[i + 1] === undefined) {
      throw new Error(`usage: reference.cjs --model DIR --photos FILE --mode detect|raw [--out DIR] [--modules DIR]; bad ${argv[i]}`);
    }
    a[k] = argv[i + 1];
  }
  if (!a.model || !a.photos || !['detect', 'raw'].includes(a.mode)) throw new Error('--model, --photos and --mode detect|raw are required');
  if (a.mode === 'raw' && !a.out) throw new Error('--mode raw needs --out DIR');
  return a;
}

// tfjs's file:// loading lives in tfjs-node, which is not installed: a load router of our own
// reads the model JSON and its weight files from disk and hands tfjs the same artifacts.
function fileRouter(tf) {
  tf.io.registerLoadRouter((url) => {
    if (typeof url !== 'string' || !url.startsWith('file://')) return null;
    const file = url.slice('file://'.length);
    return {
      load: async () => {
        const j = JSON.parse(fs.readFileSync(file, 'utf8'));
        const specs = [];
        const bufs = [];
        for (const g of j.weightsManifest) {
          specs.push(...g.weights);
          for (const p of g.paths) bufs.push(fs.readFileSync(path.join(path.dirname(file), p)));
        }
        const data = Buffer.concat(bufs);
        return {
          modelTopology: j.modelTopology,
          format: j.format,
          generatedBy: j.generatedBy,
          convertedBy: j.convertedBy,
          signature: j.signature,
          userDefinedMetadata: j.userDefinedMetadata,
          modelInitializer: j.modelInitializer,
          weightSpecs: specs,
          weightData: data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength),
        };
      },
    };
  });
}

function readPhoto(p) {
  const buf = fs.readFileSync(p.rgb);
  if (buf.length !== p.width * p.height * 3) throw new Error(`${p.rgb}: ${buf.length} bytes, not ${p.width} x ${p.height} x 3`);
  return buf;
}

async function detect(a, photos, log) {
  // Human's node-wasm build imports tfjs-core, tfjs-converter and tfjs-backend-wasm; the last is
  // pointed at tfjs-backend-cpu (which registers the 'cpu' backend Human is then told to use).
  const wasm = '@tensorflow/tfjs-backend-wasm';
  const cpu = require.resolve('@tensorflow/tfjs-backend-cpu', { paths: [a.modules] });
  const resolve = Module._resolveFilename;
  Module._resolveFilename = function redirect(request, ...rest) {
    return resolve.call(this, request === wasm ? cpu : request, ...rest);
  };
  // by path: the package's "exports" names its builds without the "./" node requires
  const entry = path.join(a.modules, '@vladmandic', 'human', 'dist', 'human.node-wasm.js');
  const H = require(entry);
  const tf = require(require.resolve('@tensorflow/tfjs-core', { paths: [a.modules] }));
  fileRouter(tf);
  const human = new H.Human({
    backend: 'cpu',
    modelBasePath: `file://${path.resolve(a.model)}/`,
    debug: false,
    async: false,
    warmup: 'none',
    cacheSensitivity: 0,
    face: { enabled: false },
    body: { enabled: false },
    hand: { enabled: false },
    gesture: { enabled: false },
    segmentation: { enabled: false },
    object: { enabled: true, modelPath: 'centernet.json', skipFrames: 0, skipTime: 0 },
  });
  await human.load();
  const out = [];
  for (const p of photos) {
    const t = tf.tensor3d(new Int32Array(readPhoto(p)), [p.height, p.width, 3], 'int32');
    const r = await human.detect(t);
    tf.dispose(t);
    if (r.error) throw new Error(`${p.name}: human.detect: ${r.error}`);
    out.push({ name: p.name, width: p.width, height: p.height, objects: r.object });
    log(`reference: ${p.name} ${r.object.length} objects`);
  }
  const hc = human.config.object;
  return {
    human: human.version, tfjs: tf.version_core, backend: tf.getBackend(),
    config: { minConfidence: hc.minConfidence, iouThreshold: hc.iouThreshold, maxDetected: hc.maxDetected },
    photos: out,
  };
}

async function raw(a, photos) {
  const tf = require(require.resolve('@tensorflow/tfjs-core', { paths: [a.modules] }));
  require(require.resolve('@tensorflow/tfjs-backend-cpu', { paths: [a.modules] }));
  const tfc = require(require.resolve('@tensorflow/tfjs-converter', { paths: [a.modules] }));
  await tf.setBackend('cpu');
  await tf.ready();
  fileRouter(tf);
  const model = await tfc.loadGraphModel(`file://${path.resolve(a.model)}/centernet.json`);
  const size = parseInt(model.modelSignature.inputs[Object.keys(model.modelSignature.inputs)[0]].tensorShape.dim[2].size, 10);
  fs.mkdirSync(a.out, { recursive: true });
  const out = [];
  for (const [i, p] of photos.entries()) {
    let input;
    if (p.input) {
      const buf = fs.readFileSync(p.input);
      if (buf.length !== size * size * 3 * 4) throw new Error(`${p.input}: ${buf.length} bytes, not [1, ${size}, ${size}, 3] float32`);
      input = tf.tensor4d(new Float32Array(buf.buffer, buf.byteOffset, size * size * 3).slice(), [1, size, size, 3], 'float32');
    } else {
      // src/image/image.ts: an int32 tensor is expanded to [1, H, W, 3] and cast to float32;
      // src/object/centernet.ts: tf.image.resizeBilinear(input, [inputSize, inputSize])
      const t = tf.tensor4d(new Int32Array(readPhoto(p)), [1, p.height, p.width, 3], 'int32');
      const f = tf.cast(t, 'float32');
      input = tf.image.resizeBilinear(f, [size, size]);
      tf.dispose([t, f]);
    }
    const res = model.execute(input, OUTPUTS);
    const files = {};
    const write = async (key, tensor) => {
      const file = path.join(a.out, `${i}.${key}.f32`);
      fs.writeFileSync(file, Buffer.from((await tensor.data()).buffer));
      files[key] = { file, shape: tensor.shape };
    };
    await write('input', input);
    for (const [j, name] of OUTPUTS.entries()) await write(name.replace('tower_0/', ''), res[j]);
    tf.dispose([input, ...res]);
    out.push({ name: p.name, files });
  }
  return { tfjs: tf.version_core, backend: tf.getBackend(), inputSize: size, photos: out };
}

async function main() {
  const a = args(process.argv.slice(2));
  const log = (...m) => process.stderr.write(`${m.join(' ')}\n`);
  console.log = log; // tfjs and Human print notices; stdout carries the JSON only
  console.info = log;
  console.warn = log;
  const photos = JSON.parse(fs.readFileSync(a.photos, 'utf8'));
  const result = a.mode === 'detect' ? await detect(a, photos, log) : await raw(a, photos);
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

main().catch((e) => {
  process.stderr.write(`reference.cjs: ${e.stack || e}\n`);
  process.exit(1);
});
