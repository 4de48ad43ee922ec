//! The service: everything loaded once at start-up, which the hosts hold. It starts ONNX
//! Runtime, reads and warms up the towers (the image model, and the text model with its tokenizer
//! when there is one), starts the model worker that owns them, and embeds the label sets. What it
//! builds is the photo [`Pipeline`] and, beside it, the [`Text`] side.

use std::{sync::Arc, time::Instant};

use anyhow::Context;
use tracing::{Instrument, field::Empty, info_span};

use crate::{
    model::{
        FaceFiles, FaceModels, Family, HeadFile, Heads, ImageModel, ObjectDetector, ObjectFiles, OcrFiles, OcrModels,
        Runtime, TextFiles, TextModel, locate_text_model, read_family, read_image_model, read_weights,
    },
    observe::metrics::{LoadedModel, Metrics},
    pipeline::Pipeline,
    settings::{ModelSettings, Placement, Settings},
    source::Source,
    storage::{Client, Storage},
    text::{Text, TextEncoder, parse_sets},
    tokenize::{JsonTokenizer, Tokenizer},
    worker::{OptionalTowers, SeatStatus, Unhealthy, Worker},
};

pub struct Service {
    pub pipeline: Pipeline,
    /// Present when there is a text tower (CLIPFN_TEXT_MODEL, or the model folder's own).
    pub text: Option<Text>,
    /// The model's family and its scoring rule.
    pub family: Family,
    worker: Arc<Worker>,
}

impl Service {
    /// Reads the model named by CLIPFN_MODEL, loads and warms it up, and starts its worker.
    pub async fn load(settings: &Settings, metrics: Arc<Metrics>) -> anyhow::Result<Self> {
        let source = Source::new(&settings.sources, &settings.limits)?;
        let storage = Storage::new(Client::new(&settings.sources));
        let (runtime, model) = load_image_model(&storage, settings, &metrics).await?;
        let family = read_family(&storage, &settings.model.model).await.context("CLIPFN_MODEL")?;
        let heads = load_heads(&storage, settings, runtime.clone(), &model).await?;
        let faces = load_faces(&storage, settings, runtime.clone(), &model).await?;
        let ocr = load_ocr(&storage, settings, runtime.clone(), &model).await?;
        let objects = load_objects(&storage, settings, runtime.clone(), &model).await?;
        let text = load_text_model(&storage, settings, runtime, &model).await?;
        let (text_model, tokenizer) = text.unzip();
        let batch_wait = std::time::Duration::from_millis(settings.model.batch_wait_ms);
        let worker = Arc::new(Worker::start(
            model,
            text_model,
            OptionalTowers { heads, faces, ocr, objects },
            batch_wait,
            Arc::clone(&metrics),
        ));
        let pipeline = Pipeline::new(&settings.limits, source, Arc::clone(&worker), Arc::clone(&metrics));
        let text = match (worker.text_info(), tokenizer) {
            (Some(info), Some(tokenizer)) => {
                let encoder = TextEncoder::new(Arc::new(tokenizer), info.id.clone(), settings.text.text_cache, metrics);
                let mut text = Text::new(encoder, Arc::clone(&worker), family.scoring());
                if let Some(location) = &settings.text.labels {
                    // Label sets are for classifying: a model that cannot must not start with them.
                    text.scoring().context("CLIPFN_LABELS")?;
                    embed_label_sets(&storage, &mut text, location).await?;
                }
                Some(text)
            }
            _ => None,
        };
        Ok(Service { family, ..Service::assemble(pipeline, text, worker) })
    }

    /// The parts, already built (tests build them around a stand-in model, a CLIP).
    pub(crate) fn assemble(pipeline: Pipeline, text: Option<Text>, worker: Arc<Worker>) -> Self {
        Service { pipeline, text, family: Family::clip("clip".into()), worker }
    }

    /// Whether every model worker can still serve (see `worker`).
    pub fn health(&self) -> Result<(), Unhealthy> {
        self.worker.health()
    }

    /// Whether the image tower's worker, which every request needs, can still serve.
    pub fn image_health(&self) -> Result<(), Unhealthy> {
        self.worker.image_health()
    }

    /// Each model worker: its device, towers, time busy and health.
    pub fn workers(&self) -> Vec<SeatStatus> {
        self.worker.workers()
    }
}

/// The image tower, on the provider the runtime tries first: it decides which file of a model
/// folder to read. The runtime comes back too, for the text tower to run where the image tower does.
async fn load_image_model(
    storage: &Storage,
    settings: &Settings,
    metrics: &Metrics,
) -> anyhow::Result<(Runtime, ImageModel)> {
    let started = Instant::now();
    let span = info_span!("model_load", clipfn.model = Empty, clipfn.provider = Empty);
    let (runtime_took, read_took, runtime, model) = async {
        // A short blocking call; the other runtime threads keep /healthz answering.
        let mut runtime = Runtime::start(&settings.model)?;
        let runtime_took = started.elapsed();
        let file = read_image_model(storage, &settings.model, runtime.device()).await.context("CLIPFN_MODEL")?;
        let read_took = started.elapsed() - runtime_took;
        let model_settings = settings.model.clone();
        let (runtime, model) = blocking(move || {
            let model = ImageModel::load(&mut runtime, &model_settings, file);
            model.map(|model| (runtime, model))
        })
        .await??;
        anyhow::Ok((runtime_took, read_took, runtime, model))
    }
    .instrument(span.clone())
    .await?;
    let (info, timings) = (&model.info, model.timings);
    span.record("clipfn.model", info.id.as_str()).record("clipfn.provider", info.provider.as_str());
    let loaded = LoadedModel {
        id: &info.id,
        provider: info.provider.as_str(),
        file: &info.file,
        precision: info.precision.as_str(),
    };
    metrics.model_loaded(started.elapsed(), loaded);
    tracing::info!(
        model = %info.id, file = %info.file, precision = info.precision.as_str(), provider = info.provider.as_str(),
        fallback_reason = info.fallback_reason.as_deref(),
        image_size = info.image_size, dim = info.dim, batch_size = info.batch_size,
        intra_threads = settings.model.intra_threads(), decode_threads = settings.limits.decode_threads(),
        runtime_ms = runtime_took.as_millis() as u64, read_ms = read_took.as_millis() as u64,
        session_ms = timings.session.as_millis() as u64, warm_up_ms = timings.warm_up.as_millis() as u64,
        load_ms = started.elapsed().as_millis() as u64, "model loaded and warmed up"
    );
    Ok((runtime, model))
}

/// Loads the text tower, when there is one (see `locate_text_model`), beside the image model (same
/// runtime and provider), with its tokenizer: a tokenizer.json, else CLIP's BPE.
async fn load_text_model(
    storage: &Storage,
    settings: &Settings,
    mut runtime: Runtime,
    image: &ImageModel,
) -> anyhow::Result<Option<(TextModel, Tokenizer)>> {
    let Some(TextFiles { model: location, id, tokenizer, tokenizer_config }) =
        locate_text_model(storage, &settings.model, &settings.text, runtime.device())
            .await
            .context("the text model")?
    else {
        return Ok(None);
    };
    let started = Instant::now();
    let tokenizer = match &tokenizer {
        Some(file) => {
            let bytes = storage.read(file).await.with_context(|| format!("reading the tokenizer.json {file}"))?;
            let config = match &tokenizer_config {
                Some(config) => Some(storage.read(config).await.with_context(|| format!("reading {config}"))?),
                None => None,
            };
            let json = JsonTokenizer::from_bytes(&bytes, config.as_deref(), settings.text.text_max_tokens)
                .with_context(|| format!("the tokenizer.json {file}"))?;
            Tokenizer::Json(Box::new(json))
        }
        None => Tokenizer::clip(),
    };
    let data = read_weights(storage, &location).await.context("the text model")?;
    let model_settings = settings.model.clone();
    let image_info = image.info.clone();
    let text = blocking(move || {
        let text = TextModel::load(&mut runtime, &image_info, &model_settings, data, id, &tokenizer);
        text.map(|text| (text, tokenizer))
    })
    .await?;
    let (text, tokenizer) = text.with_context(|| format!("loading text model {location}"))?;
    tracing::info!(
        model = %text.info.id, dim = text.info.dim, tokenizer = text.info.tokenizer,
        attention_mask = text.info.mask_name.is_some(), load_ms = started.elapsed().as_millis() as u64,
        "text model loaded and warmed up"
    );
    Ok(Some((text, tokenizer)))
}

/// Loads the heads `CLIPFN_HEADS` names, when it names any, on the image tower's runtime and for
/// its embeddings.
async fn load_heads(
    storage: &Storage,
    settings: &Settings,
    mut runtime: Runtime,
    image: &ImageModel,
) -> anyhow::Result<Option<Heads>> {
    let named = settings.model.heads()?;
    if named.is_empty() {
        return Ok(None);
    }
    let mut files = Vec::with_capacity(named.len());
    for (name, location) in named {
        let data = read_weights(storage, &location).await.with_context(|| format!("CLIPFN_HEADS: head '{name}'"))?;
        files.push(HeadFile { name, location, data });
    }
    let (model_settings, dim, batch_size) = (settings.model.clone(), image.info.dim, image.info.batch_size);
    let heads = blocking(move || Heads::load(&mut runtime, &model_settings, files, dim, batch_size))
        .await?
        .context("CLIPFN_HEADS")?;
    tracing::info!(heads = ?heads.info.names, files = ?heads.info.files, "heads loaded and warmed up");
    Ok(Some(heads))
}

/// Loads the face detector and recognizer from the folder `CLIPFN_FACE_MODEL` names, when it names
/// one, on the image tower's runtime; the recognizer batches as the image tower does.
async fn load_faces(
    storage: &Storage,
    settings: &Settings,
    runtime: Runtime,
    image: &ImageModel,
) -> anyhow::Result<Option<FaceModels>> {
    let Some(folder) = &settings.faces.face_model else { return Ok(None) };
    let read = async |part: &str| {
        let location = format!("{}/{part}/model.onnx", folder.trim_end_matches('/'));
        let data = read_weights(storage, &location).await.with_context(|| format!("CLIPFN_FACE_MODEL: {location}"))?;
        anyhow::Ok((location, data))
    };
    let files = FaceFiles { detector: read("detection").await?, recognizer: read("recognition").await? };
    let face_settings = settings.faces.clone();
    let (mut runtime, model_settings) = placed(runtime, face_settings.face_provider, &settings.model);
    let batch_size = image.info.batch_size;
    let faces = blocking(move || FaceModels::load(&mut runtime, &model_settings, files, &face_settings, batch_size))
        .await?
        .context("CLIPFN_FACE_MODEL")?;
    let (detector, recognizer) = (&faces.detector.info, &faces.recognizer.info);
    tracing::info!(detector = ?detector, recognizer = ?recognizer, "face models loaded and warmed up");
    Ok(Some(faces))
}

/// Loads the OCR models from the folder `CLIPFN_OCR_MODEL` names, when it names one, on the image
/// tower's runtime: the classifier and the character file where the folder has them.
async fn load_ocr(
    storage: &Storage,
    settings: &Settings,
    runtime: Runtime,
    image: &ImageModel,
) -> anyhow::Result<Option<OcrModels>> {
    let Some(folder) = &settings.ocr.ocr_model else { return Ok(None) };
    let folder = folder.trim_end_matches('/');
    let listed = storage.list(folder).await.with_context(|| format!("CLIPFN_OCR_MODEL: listing {folder}"))?;
    let has = |file: &str| listed.iter().any(|f| f == file);
    let read = async |part: &str| {
        let location = format!("{folder}/{part}/model.onnx");
        let data = read_weights(storage, &location).await.with_context(|| format!("CLIPFN_OCR_MODEL: {location}"))?;
        anyhow::Ok((location, data))
    };
    let characters = match has("recognition/characters.txt") {
        true => {
            let location = format!("{folder}/recognition/characters.txt");
            let bytes = storage.read(&location).await.with_context(|| format!("CLIPFN_OCR_MODEL: {location}"))?;
            let list = String::from_utf8(bytes.to_vec()).with_context(|| format!("{location} is not UTF-8"))?;
            Some((location, list))
        }
        false => None,
    };
    let files = OcrFiles {
        detector: read("detection").await?,
        classifier: match has("classification/model.onnx") {
            true => Some(read("classification").await?),
            false => None,
        },
        recognizer: read("recognition").await?,
        characters,
    };
    let (batch_size, ocr_settings) = (image.info.batch_size, settings.ocr.clone());
    let (mut runtime, model_settings) = placed(runtime, ocr_settings.ocr_provider, &settings.model);
    let ocr = blocking(move || OcrModels::load(&mut runtime, &model_settings, files, &ocr_settings, batch_size))
        .await?
        .context("CLIPFN_OCR_MODEL")?;
    tracing::info!(models = ?ocr.info(), "OCR models loaded and warmed up");
    Ok(Some(ocr))
}

/// Loads the object detector from the folder `CLIPFN_OBJECT_MODEL` names, when it names one, on
/// the image tower's runtime: its `classes.txt` where the folder has one.
async fn load_objects(
    storage: &Storage,
    settings: &Settings,
    runtime: Runtime,
    image: &ImageModel,
) -> anyhow::Result<Option<ObjectDetector>> {
    let Some(folder) = &settings.objects.object_model else { return Ok(None) };
    let folder = folder.trim_end_matches('/');
    let listed = storage.list(folder).await.with_context(|| format!("CLIPFN_OBJECT_MODEL: listing {folder}"))?;
    let location = format!("{folder}/model.onnx");
    let data = read_weights(storage, &location).await.with_context(|| format!("CLIPFN_OBJECT_MODEL: {location}"))?;
    let classes = match listed.iter().any(|file| file == "classes.txt") {
        true => {
            let location = format!("{folder}/classes.txt");
            let bytes = storage.read(&location).await.with_context(|| format!("CLIPFN_OBJECT_MODEL: {location}"))?;
            let list = String::from_utf8(bytes.to_vec()).with_context(|| format!("{location} is not UTF-8"))?;
            Some((location, list))
        }
        false => None,
    };
    let files = ObjectFiles { model: (location, data), classes };
    let (batch_size, object_settings) = (image.info.batch_size, settings.objects.clone());
    let (mut runtime, model_settings) = placed(runtime, object_settings.object_provider, &settings.model);
    let detector =
        blocking(move || ObjectDetector::load(&mut runtime, &model_settings, files, &object_settings, batch_size))
            .await?
            .context("CLIPFN_OBJECT_MODEL")?;
    tracing::info!(detector = ?detector.info, "object detector loaded and warmed up");
    Ok(Some(detector))
}

/// The runtime and the settings for a detector's towers: `runtime`, or its CPU twin where they are
/// placed there, with the CPU worker's threads where the image tower runs on CUDA.
fn placed(runtime: Runtime, placement: Placement, settings: &ModelSettings) -> (Runtime, ModelSettings) {
    match placement {
        Placement::Auto => (runtime, settings.clone()),
        Placement::Cpu if runtime.device().is_cuda() => {
            let threads = settings.cpu_worker_threads();
            (runtime.on_cpu(), ModelSettings { intra_threads: threads, ..settings.clone() })
        }
        Placement::Cpu => (runtime.on_cpu(), settings.clone()),
    }
}

/// `load` on a blocking thread, inside the current span: building and warming up a session holds a
/// core for seconds, and the other runtime threads keep /healthz answering meanwhile.
async fn blocking<T: Send + 'static>(load: impl FnOnce() -> T + Send + 'static) -> anyhow::Result<T> {
    let span = tracing::Span::current();
    Ok(tokio::task::spawn_blocking(move || span.in_scope(load)).await?)
}

/// Reads CLIPFN_LABELS and embeds every set.
async fn embed_label_sets(storage: &Storage, text: &mut Text, location: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    let bytes = storage.read(location).await.context("reading CLIPFN_LABELS")?;
    let sets = parse_sets(&bytes).context("CLIPFN_LABELS")?;
    let count = sets.len();
    text.embed_label_sets(sets)
        .await
        .map_err(|(name, e)| anyhow::Error::new(e).context(format!("label set '{name}'")))?;
    tracing::info!(sets = count, ms = started.elapsed().as_millis() as u64, "label sets embedded");
    Ok(())
}
