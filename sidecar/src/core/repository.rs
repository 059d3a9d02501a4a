//! The model registry: lookup by name and version with Triton's messages, the repository index,
//! and explicit load / unload.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;

use super::model::Model;
use crate::cxx_number;
use crate::error::{Error, Result};

/// Builds models by name; the built-in catalog implements it.
pub trait ModelLoader: Send + Sync {
    /// Every model name this loader can load.
    fn names(&self) -> Vec<String>;
    /// Builds `name`, with `config_override` (a JSON object of `ModelConfig` fields) applied
    /// on top of the model's own configuration.
    fn load(&self, name: &str, config_override: Option<&serde_json::Value>) -> Result<Model>;
    /// Whether clients may load and unload `name` here; an error (UNIMPLEMENTED) answers both
    /// requests when the models are managed elsewhere (an upstream's, in its model container).
    fn allows_model_control(&self, _name: &str) -> Result<()> {
        Ok(())
    }
}

/// A row of the repository index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub name: String,
    pub version: Option<String>,
    pub state: Option<&'static str>,
    pub reason: String,
}

struct Slot {
    model: Option<Arc<Model>>,
    /// Why the model is not loaded (empty while it is).
    reason: String,
    /// Ever loaded: unloaded models are listed with their version and state.
    version: Option<i64>,
}

pub struct Repository {
    slots: RwLock<BTreeMap<String, Slot>>,
    loader: Arc<dyn ModelLoader>,
}

/// Parses a requested version: empty is "latest" (`None`). Read as Triton reads it, with
/// `std::stol` (see [`cxx_number`]).
pub fn parse_version(version: &str) -> Result<Option<i64>> {
    if version.is_empty() {
        return Ok(None);
    }
    match cxx_number::stol(version) {
        Ok(v) if v >= 0 => Ok(Some(v)),
        Ok(_) => Err(Error::invalid_arg(format!(
            "invalid model version specified '{version}' , version should be an integral value > 0"
        ))),
        Err(_) => Err(Error::invalid_arg(format!(
            "failed to get model version from specified version string '{version}' (details: stol), version should be an integral value > 0"
        ))),
    }
}

fn unknown(message: String) -> Error {
    Error::not_found(format!("Request for unknown model: {message}"))
}

impl Repository {
    /// Loads every model of `names` (all of the loader's when `names` is empty).
    pub fn new(loader: Arc<dyn ModelLoader>, names: &[String]) -> Result<Self> {
        let names = if names.is_empty() {
            loader.names()
        } else {
            names.to_vec()
        };
        let mut slots = BTreeMap::new();
        for name in names {
            let model = loader.load(&name, None)?;
            log_loaded(&model);
            let version = Some(model.version);
            slots.insert(
                name,
                Slot {
                    model: Some(Arc::new(model)),
                    reason: String::new(),
                    version,
                },
            );
        }
        Ok(Repository {
            slots: RwLock::new(slots),
            loader,
        })
    }

    /// A repository whose models arrive later (an upstream not discovered yet).
    pub fn empty(loader: Arc<dyn ModelLoader>) -> Self {
        Repository {
            slots: RwLock::new(BTreeMap::new()),
            loader,
        }
    }

    /// Replaces every model with `models`.
    pub fn install(&self, models: Vec<Model>) {
        let mut slots = self.slots.write();
        for slot in slots.values() {
            slot.model.iter().for_each(|m| m.retire());
        }
        slots.clear();
        for model in models {
            let version = Some(model.version);
            slots.insert(
                model.name.clone(),
                Slot {
                    model: Some(Arc::new(model)),
                    reason: String::new(),
                    version,
                },
            );
        }
    }

    pub fn get(&self, name: &str, version: &str) -> Result<Arc<Model>> {
        let wanted = parse_version(version)?;
        let slots = self.slots.read();
        let Some(slot) = slots.get(name) else {
            return Err(unknown(format!("'{name}' is not found")));
        };
        match (&slot.model, wanted) {
            (Some(model), None) => Ok(model.clone()),
            (Some(model), Some(v)) if v == model.version => Ok(model.clone()),
            (None, None) => Err(unknown(format!("'{name}' has no available versions"))),
            (None, Some(v)) if slot.version == Some(v) => Err(Error::unavailable(format!(
                "Request for unknown model: '{name}' version {v} is not at ready state"
            ))),
            (_, Some(v)) => Err(unknown(format!("'{name}' version {v} is not found"))),
        }
    }

    /// Ready models, by name.
    pub fn ready_models(&self) -> Vec<Arc<Model>> {
        self.slots
            .read()
            .values()
            .filter_map(|s| s.model.clone())
            .collect()
    }

    /// Whether `name` (at `version`) is ready; `Err` for a model the repository does not know.
    pub fn is_ready(&self, name: &str, version: &str) -> Result<bool> {
        match self.get(name, version) {
            Ok(_) => Ok(true),
            Err(e)
                if e.code == crate::error::Code::NotFound
                    && e.message.ends_with("is not found") =>
            {
                Err(e)
            }
            Err(e) if e.code == crate::error::Code::InvalidArg => Err(e),
            Err(_) => Ok(false),
        }
    }

    pub fn index(&self, ready_only: bool) -> Vec<IndexEntry> {
        let slots = self.slots.read();
        let mut names: Vec<String> = self.loader.names();
        for name in slots.keys() {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        names.sort();
        let mut out = Vec::new();
        for name in names {
            match slots.get(&name) {
                Some(Slot { model: Some(m), .. }) => out.push(IndexEntry {
                    name,
                    version: Some(m.version_string()),
                    state: Some("READY"),
                    reason: String::new(),
                }),
                Some(Slot {
                    model: None,
                    reason,
                    version,
                }) if !ready_only => out.push(IndexEntry {
                    name,
                    version: version.map(|v| v.to_string()),
                    state: Some("UNAVAILABLE"),
                    reason: reason.clone(),
                }),
                None if !ready_only => out.push(IndexEntry {
                    name,
                    version: None,
                    state: None,
                    reason: String::new(),
                }),
                _ => {}
            }
        }
        out
    }

    /// The answer to a load that carries `file:` overrides (model files sent with the request).
    /// Triton writes them into a directory of their own and polls it; the sidecar cannot serve
    /// model files, so the load fails as a failed poll does in Triton (INTERNAL, the text Triton's
    /// clients look for), with the reason after it.
    pub fn file_overrides_refused(name: &str) -> Error {
        Error::internal(format!(
            "failed to load '{name}', {POLL_FAILED}: \
             file overrides are not supported (the sidecar does not load model files)"
        ))
    }

    /// Loads (or loads again) `name`, with `config_override` (a load request's `config`
    /// parameter, JSON text) over the model's own configuration. As in Triton, a model the
    /// repository does not have and an override that does not parse fail the same way, as a
    /// failed poll of the repository, with the details in the log.
    pub fn load(&self, name: &str, config_override: Option<&str>) -> Result<()> {
        self.loader.allows_model_control(name)?;
        check_name_to_load(name)?;
        if !self.loader.names().iter().any(|n| n == name) {
            return Err(poll_failed(name));
        }
        // Triton does not load a model again whose files have not changed: a load without a
        // configuration keeps a loaded model as it is (its configuration and statistics), and
        // so does one whose configuration is the loaded one's (below).
        let loaded = self
            .slots
            .read()
            .get(name)
            .is_some_and(|s| s.model.is_some());
        if config_override.is_none() && loaded {
            return Ok(());
        }
        let overlay = match config_override.map(serde_json::from_str::<serde_json::Value>) {
            None => None,
            Some(Ok(value)) => Some(value),
            Some(Err(e)) => {
                tracing::warn!(model = %name, error = %e, "the load's configuration is not JSON");
                return Err(poll_failed(name));
            }
        };
        let mut model = match self.loader.load(name, overlay.as_ref()) {
            Ok(model) => model,
            Err(e) => {
                let error = Error::internal(format!("failed to load '{name}', {}", e.message));
                // The message may quote the load's configuration, the client's text.
                tracing::error!("{}", crate::log::line::printable(&error.message));
                return Err(error);
            }
        };
        let version = Some(model.version);
        let mut slots = self.slots.write();
        if let Some(old) = slots.get(name).and_then(|s| s.model.as_ref())
            && old.version == model.version
        {
            // Triton loads again only a model whose configuration changed: the same one keeps
            // the loaded model as it is (its statistics included).
            if old.config == model.config {
                return Ok(());
            }
            // A reload: the metrics go on from the replaced model's counts, as Triton's do.
            model.earlier = old.earlier.and(&old.stats);
        }
        let model = Arc::new(model);
        let replaced = slots.insert(
            name.to_string(),
            Slot {
                model: Some(model.clone()),
                reason: String::new(),
                version,
            },
        );
        drop(slots);
        if let Some(old) = replaced.and_then(|slot| slot.model) {
            old.retire();
        }
        log_loaded(&model);
        Ok(())
    }

    /// Unloads `name`. Unloading a model that is not loaded, or that the repository does not
    /// have, succeeds and changes nothing, as in Triton.
    pub fn unload(&self, name: &str) -> Result<()> {
        self.loader.allows_model_control(name)?;
        let unloaded = match self.slots.write().get_mut(name) {
            Some(slot) => slot
                .model
                .take()
                .inspect(|_| slot.reason = "unloaded".to_string()),
            None => None,
        };
        if let Some(model) = unloaded {
            model.retire();
            tracing::info!(
                "successfully unloaded '{}' version {}",
                model.name,
                model.version
            );
        }
        Ok(())
    }

    /// Logs Triton's model table (`Model | Version | Status`), as it does once its models are
    /// loaded: each model loaded or tried, with the reason of one that is not ready.
    pub fn log_model_table(&self) {
        let rows: Vec<Vec<String>> = self
            .index(false)
            .into_iter()
            .filter_map(|entry| {
                let state = entry.state?;
                let status = if entry.reason.is_empty() {
                    state.to_string()
                } else {
                    format!("{state}: {}", entry.reason)
                };
                let version = entry.version.unwrap_or_else(|| "-".to_string());
                Some(vec![entry.name, version, status])
            })
            .collect();
        let table = crate::log::line::table(&["Model", "Version", "Status"], &rows);
        tracing::info!(table = %table, "models");
    }
}

/// Triton's lines for a model it has loaded, which scripts wait for in its log.
fn log_loaded(model: &Model) {
    tracing::info!("loading: {}:{}", model.name, model.version);
    tracing::info!("successfully loaded '{}'", model.name);
}

/// The names Triton refuses to load before it looks for them (a name is a directory there).
fn check_name_to_load(name: &str) -> Result<()> {
    let trimmed = name.trim();
    if trimmed.is_empty() {
        return Err(Error::invalid_arg(
            "Model name cannot be empty. Please enter a valid name to deploy.",
        ));
    }
    if trimmed == ".." || trimmed.contains('/') {
        return Err(Error::invalid_arg(format!(
            "invalid model name '{name}', model name must not contain path traversal characters"
        )));
    }
    Ok(())
}

/// How Triton says that it could not read a model's configuration from its repository; a
/// loader's error with this text reaches the client as Triton's failed load.
pub const POLL_FAILED: &str = "failed to poll from model repository";

/// Triton's answer to a load whose model configuration cannot be read (INTERNAL).
fn poll_failed(name: &str) -> Error {
    Error::internal(format!("failed to load '{name}', {POLL_FAILED}"))
}
