//! Reading the image model that `CLIPFN_MODEL` names: one `.onnx` file as it is, or, for a model
//! folder, the file that the precision rule picks for the provider in use, with the folder's
//! preprocessing; and the text tower, named on its own or found in the same folder.

use anyhow::Context;

use super::{
    ModelData,
    folder::{
        Export, ModelFolder, PREPROCESS_CFG, PREPROCESSOR_CONFIG, TEXT, TOKENIZER, TOKENIZER_CONFIG, VISION,
        weights_of_file,
    },
    preprocessor,
};
use crate::{
    preprocess::Transform,
    settings::{Device, ModelSettings, Precision, TextSettings, Weights, is_folder},
    storage::{Storage, local_file},
};

/// An image model read for loading.
pub struct ModelFile {
    pub data: ModelData,
    /// The model's name as clients see it.
    pub id: String,
    /// Its file name (relative to its folder for a folder) and precision.
    pub file: String,
    pub precision: Weights,
    /// The folder's preprocessing, when it has a `preprocessor_config.json` (Immich's:
    /// `visual/preprocess_cfg.json`).
    pub preprocessing: Option<Transform>,
}

impl ModelFile {
    /// A bare `.onnx` file: its precision read from its name, CLIP's preprocessing.
    pub fn bare(data: ModelData, name: &str) -> Self {
        ModelFile {
            data,
            id: name.strip_suffix(".onnx").unwrap_or(name).to_string(),
            file: name.to_string(),
            precision: weights_of_file(name),
            preprocessing: None,
        }
    }
}

/// Lists the model folder at `location` (a path, or a URI prefix).
pub(super) async fn open_folder(storage: &Storage, location: &str) -> anyhow::Result<ModelFolder> {
    let files = storage.list(location).await.with_context(|| format!("listing {location}"))?;
    Ok(ModelFolder::new(location, files))
}

/// Reads the image tower to run on `device`.
pub async fn read_image_model(
    storage: &Storage,
    settings: &ModelSettings,
    device: Device,
) -> anyhow::Result<ModelFile> {
    let location = settings.model.as_str();
    if !is_folder(location) {
        let name = location.rsplit('/').next().unwrap_or(location);
        let precision = weights_of_file(name);
        if ![Precision::Auto, Precision::Exactly(precision)].contains(&settings.precision) {
            anyhow::bail!(
                "CLIPFN_PRECISION picks a file of a model folder, but CLIPFN_MODEL names one file ({name}, {} by its name)",
                precision.as_str()
            );
        }
        return Ok(ModelFile::bare(read_weights(storage, location).await?, name));
    }
    let folder = open_folder(storage, location).await?;
    let variant = folder.pick(VISION, settings.precision, device)?;
    let (file, parse): (_, preprocessor::Reader) = match folder.export() {
        Export::Transformers => (PREPROCESSOR_CONFIG, preprocessor::parse),
        Export::Immich => (PREPROCESS_CFG, preprocessor::parse_open_clip),
    };
    let file = folder.beside(VISION, file);
    let preprocessing = match folder.has(&file) {
        true => {
            let config = folder.locate(&file);
            let bytes = storage.read(&config).await.with_context(|| format!("reading {config}"))?;
            Some(parse(&bytes).with_context(|| format!("in {config}"))?)
        }
        false => None,
    };
    let path = folder.locate(&variant.file);
    Ok(ModelFile {
        data: read_weights(storage, &path).await?,
        id: folder.name().to_string(),
        file: variant.file,
        precision: variant.precision,
        preprocessing,
    })
}

/// A local model file is left for ONNX Runtime to read (no copy in clipfn); one in a store is
/// fetched.
pub async fn read_weights(storage: &Storage, location: &str) -> anyhow::Result<ModelData> {
    let data = match local_file(location) {
        Some(path) => path.map(ModelData::File),
        None => storage.read(location).await.map(ModelData::Bytes),
    };
    data.with_context(|| format!("reading {location}"))
}

/// Where the text tower comes from.
pub struct TextFiles {
    /// Path or URI of the ONNX file.
    pub model: String,
    /// The id clients see: the file name without `.onnx`, or the folder's name.
    pub id: String,
    /// A tokenizer.json; `None`: CLIP's BPE.
    pub tokenizer: Option<String>,
    /// The folder's tokenizer_config.json, beside the folder's own tokenizer.json.
    pub tokenizer_config: Option<String>,
}

/// `CLIPFN_TEXT_MODEL` (with `CLIPFN_TEXT_TOKENIZER`) when set; else, when `CLIPFN_MODEL` is a
/// folder with a text tower (`onnx/text_model*.onnx`, Immich's `textual/model.onnx`), the variant
/// the image tower's precision rule picks, with the folder's `tokenizer.json` (and
/// `tokenizer_config.json`) unless `CLIPFN_TEXT_TOKENIZER` names another. `None`: no text tower.
pub async fn locate_text_model(
    storage: &Storage,
    model: &ModelSettings,
    text: &TextSettings,
    device: Device,
) -> anyhow::Result<Option<TextFiles>> {
    if let Some(location) = &text.text_model {
        let name = location.rsplit('/').next().unwrap_or(location);
        let id = name.strip_suffix(".onnx").unwrap_or(name).to_string();
        let tokenizer = text.text_tokenizer.clone();
        return Ok(Some(TextFiles { model: location.clone(), id, tokenizer, tokenizer_config: None }));
    }
    if !is_folder(&model.model) {
        return Ok(None);
    }
    let folder = open_folder(storage, &model.model).await?;
    if !folder.has_tower(TEXT) {
        return Ok(None);
    }
    let variant = folder.pick(TEXT, model.precision, device)?;
    let own = |file: &str| {
        let file = folder.beside(TEXT, file);
        (text.text_tokenizer.is_none() && folder.has(&file)).then(|| folder.locate(&file))
    };
    let tokenizer = text.text_tokenizer.clone().or_else(|| own(TOKENIZER));
    let (model, id, tokenizer_config) =
        (folder.locate(&variant.file), folder.name().to_string(), own(TOKENIZER_CONFIG));
    Ok(Some(TextFiles { model, id, tokenizer, tokenizer_config }))
}
