//! The model registry: lookup by name and version with Triton's messages, the repository index,
//! and explicit load / unload.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;

use super::cxx_number;
use super::model::Model;
use crate::error::{Error, Result};

/// Builds models by name; the built-in catalog implements it.
pub trait ModelLoader: Send + Sync {
    /// Every model name this loader can load.
    fn names(&self) -> Vec<String>;
    /// Builds `name`, with `config_override` (a JSON object of `ModelConfig` fields) applied
    /// on top of the model's own configuration.
    fn load(&self, name: &str, config_override: Option<&serde_json::Value>) -> Result<Model>;
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

    pub fn load(&self, name: &str, config_override: Option<&serde_json::Value>) -> Result<()> {
        if !self.loader.names().iter().any(|n| n == name) {
            return Err(Error::internal(format!(
                "failed to load '{name}', failed to poll from model repository"
            )));
        }
        let model = self
            .loader
            .load(name, config_override)
            .map_err(|e| Error::internal(format!("failed to load '{name}', {}", e.message)))?;
        let version = Some(model.version);
        self.slots.write().insert(
            name.to_string(),
            Slot {
                model: Some(Arc::new(model)),
                reason: String::new(),
                version,
            },
        );
        Ok(())
    }

    pub fn unload(&self, name: &str) -> Result<()> {
        let mut slots = self.slots.write();
        match slots.get_mut(name) {
            Some(slot) => {
                slot.model = None;
                slot.reason = "unloaded".to_string();
                Ok(())
            }
            None => Err(Error::invalid_arg(format!(
                "failed to unload '{name}', no version is available"
            ))),
        }
    }
}
