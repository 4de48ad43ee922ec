#!/usr/bin/env node
// nsfwjs 4.4.0's own MobileNetV2Mid pipeline under plain node: the reference that
// tools/sensitive_parity.py holds the converted ONNX model (.cache/models/sensitive-nsfwjs) to.
//
//   node tools/sensitive/reference.cjs --mode export|classify|raw [--photos FILE] [--out DIR]
//                                      [--modules DIR]
//
// --mode     export: the model as nsfwjs itself loads it, for tools/nsfwjs_onnx.py: the package's
//            own loaders (require('nsfwjs/models/mobilenet_v2_mid'), the modules nsfwjs.load
//            imports) give the model JSON (dist/models/mobilenet_v2_mid/model.min.js) and the
//            base64 weight bundles (group1-shard1of2.min.js, group1-shard2of2.min.js); written to
//            --out as model.json (as is), one file per manifest path (the bundle's bytes, decoded
//            from base64 as nsfwjs's JSONHandler decodes them) and classes.json
//            (dist/cjs/nsfw_classes.js's NSFW_CLASSES, index -> name).
//            classify: nsfwjs.load('MobileNetV2Mid') (the packaged files, no download) on
//            tfjs-backend-cpu, then nsfw.classify(photo, 5) on each photo given as an int32
//            [H, W, 3] tensor of its RGB bytes (tf.browser.fromPixels's and tf.node.decodeImage's
//            type); prints every class's probability (5 of 5: classify's top-k is all of them)
//            and each classify's run time.
//            raw: the same, and the exact float32 [1, 224, 224, 3] tensor that nsfwjs's infer()
//            hands model.predict (caught by wrapping predict) goes to --out as <i>.input.f32.
//            predict: the same loaded model's model.predict on given inputs (entries with
//            "input", raw little-endian float32 [1, 224, 224, 3]): the model alone, no
//            preprocessing.
// --photos   a JSON list; each entry {"name", "rgb": FILE, "width": W, "height": H} (raw uint8 RGB,
//            H x W x 3, row-major: the photo as decoded by the caller, so JS and Python see the same
//            pixels) or, in predict mode, {"name", "input": FILE}
// --modules  the node_modules that tools/setup-sensitive.sh installed from tools/sensitive's
//            lockfile (default: .cache/node-sensitive/node_modules beside this repository's tools/)
//
// Plain JavaScript kernels only (tfjs-backend-cpu): no native build, no download. Anything the
// libraries log goes to stderr; stdout carries the JSON only.
'use strict';

const fs = require('fs');
const path = require('path');

const SIZE = 224;

function args(argv) {
  const a = { modules: path.join(__dirname, '..', '..', '.cache', 'node-sensitive', 'node_modules') };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '');
    if (!['photos', 'mode', 'out', 'modules'].includes(k) || argv[i + 1] === undefined) {
      throw new Error(`usage: reference.cjs --mode export|classify|raw|predict [--photos FILE] [--out DIR] [--modules DIR]; bad ${argv[i]}`);
    }
    a[k] = argv[i + 1];
  }
  if (!['export', 'classify', 'raw', 'predict'].includes(a.mode)) throw new Error('--mode export|classify|raw|predict is required');
  if (a.mode !== 'export' && !a.photos) throw new Error(`--mode ${a.mode} needs --photos FILE`);
  if (['export', 'raw'].includes(a.mode) && !a.out) throw new Error(`--mode ${a.mode} needs --out DIR`);
  a.modules = path.resolve(a.modules); // require() takes a bare relative path for a package name
  return a;
}

const need = (a, id) => require(require.resolve(id, { paths: [a.modules] }));
// by path: the package's "exports" map does not name dist/cjs/nsfw_classes.js
const classesOf = (a) => require(path.join(a.modules, 'nsfwjs', 'dist', 'cjs', 'nsfw_classes.js')).NSFW_CLASSES;

async function exportModel(a) {
  const def = need(a, 'nsfwjs/models/mobilenet_v2_mid').MobileNetV2MidModel;
  const json = (await def.modelJson()).default;
  fs.mkdirSync(a.out, { recursive: true });
  fs.writeFileSync(path.join(a.out, 'model.json'), JSON.stringify(json));
  // core.js getWeightData: bundle i is "group1-shard<i+1>of<n>", the manifest's path names
  const files = [];
  for (let i = 0; i < def.numOfWeightBundles; i++) {
    const name = `group1-shard${i + 1}of${def.numOfWeightBundles}`;
    const bytes = Buffer.from((await def.weightBundles[i]()).default, 'base64');
    fs.writeFileSync(path.join(a.out, name), bytes);
    files.push({ name, bytes: bytes.length });
  }
  const manifest = json.weightsManifest.flatMap((g) => g.paths);
  if (JSON.stringify(manifest) !== JSON.stringify(files.map((f) => f.name))) {
    throw new Error(`manifest paths ${manifest} are not the bundles ${files.map((f) => f.name)}`);
  }
  fs.writeFileSync(path.join(a.out, 'classes.json'), JSON.stringify(classesOf(a)));
  const version = JSON.parse(fs.readFileSync(path.join(a.modules, 'nsfwjs', 'package.json'), 'utf8')).version;
  return { nsfwjs: version, model: def.name, nodes: json.modelTopology.node.length, weights: files, out: a.out };
}

async function loadNsfw(a) {
  const tf = need(a, '@tensorflow/tfjs'); // the instance nsfwjs itself requires
  await tf.setBackend('cpu');
  await tf.ready();
  const nsfwjs = need(a, 'nsfwjs');
  const t = Date.now();
  const nsfw = await nsfwjs.load('MobileNetV2Mid');
  return { tf, nsfw, loadMs: Date.now() - t };
}

function readPhoto(p) {
  const buf = fs.readFileSync(p.rgb);
  if (buf.length !== p.width * p.height * 3) throw new Error(`${p.rgb}: ${buf.length} bytes, not ${p.width} x ${p.height} x 3`);
  return buf;
}

async function classify(a, photos, log, dump) {
  const { tf, nsfw, loadMs } = await loadNsfw(a);
  const names = Object.values(classesOf(a));
  let caught = null;
  const predict = nsfw.model.predict.bind(nsfw.model);
  nsfw.model.predict = (x, config) => {
    if (dump) caught = { data: x.dataSync().slice(), shape: x.shape };
    return predict(x, config);
  };
  if (dump) fs.mkdirSync(a.out, { recursive: true });
  const out = [];
  for (const [i, p] of photos.entries()) {
    const img = tf.tensor3d(new Int32Array(readPhoto(p)), [p.height, p.width, 3], 'int32');
    const t = process.hrtime.bigint();
    const top = await nsfw.classify(img, names.length);
    const ms = Number(process.hrtime.bigint() - t) / 1e6;
    tf.dispose(img);
    const scores = Object.fromEntries(top.map((c) => [c.className, c.probability]));
    if (Object.keys(scores).length !== names.length) throw new Error(`${p.name}: classify gave ${top.length} classes`);
    const row = { name: p.name, width: p.width, height: p.height, scores, ms };
    if (dump) {
      row.input = { file: path.join(a.out, `${i}.input.f32`), shape: caught.shape };
      fs.writeFileSync(row.input.file, Buffer.from(caught.data.buffer));
    }
    out.push(row);
    log(`reference: ${p.name} ${top.map((c) => `${c.className} ${c.probability.toFixed(3)}`).join(', ')}`);
  }
  return { tfjs: tf.version.tfjs, backend: tf.getBackend(), model: 'MobileNetV2Mid', classes: names, loadMs, photos: out };
}

async function predict(a, photos) {
  const { tf, nsfw } = await loadNsfw(a);
  const names = Object.values(classesOf(a));
  const out = [];
  for (const p of photos) {
    const buf = fs.readFileSync(p.input);
    if (buf.length !== SIZE * SIZE * 3 * 4) throw new Error(`${p.input}: ${buf.length} bytes, not [1, ${SIZE}, ${SIZE}, 3] float32`);
    const x = tf.tensor4d(new Float32Array(buf.buffer, buf.byteOffset, SIZE * SIZE * 3).slice(), [1, SIZE, SIZE, 3], 'float32');
    const y = nsfw.model.predict(x);
    const v = Array.from(await y.data());
    tf.dispose([x, y]);
    out.push({ name: p.name, scores: Object.fromEntries(names.map((n, j) => [n, v[j]])) });
  }
  return { tfjs: tf.version.tfjs, backend: tf.getBackend(), classes: names, photos: out };
}

async function main() {
  const a = args(process.argv.slice(2));
  const log = (...m) => process.stderr.write(`${m.join(' ')}\n`);
  console.log = log; // tfjs and nsfwjs print notices; stdout carries the JSON only
  console.info = log;
  console.warn = log;
  let result;
  if (a.mode === 'export') {
    result = await exportModel(a);
  } else {
    const photos = JSON.parse(fs.readFileSync(a.photos, 'utf8'));
    result = a.mode === 'predict' ? await predict(a, photos) : await classify(a, photos, log, a.mode === 'raw');
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

main().catch((e) => {
  process.stderr.write(`reference.cjs: ${e.stack || e}\n`);
  process.exit(1);
});
