//! Triton's restricted APIs and protocols: `--http-restricted-api` and
//! `--grpc-restricted-protocol`, each given as `<categories>:<key>=<value>` (Triton's
//! `ParseRestrictedFeatureOption`). A request to a restricted category is served only when it
//! carries the header (gRPC: metadata) `<key>` with exactly `<value>`; on gRPC the key is
//! prefixed with `triton-grpc-protocol-`, as Triton prefixes it.

/// What can be restricted, with Triton's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestrictedCategory {
    Health,
    Metadata,
    Inference,
    SharedMemory,
    ModelConfig,
    ModelRepository,
    Statistics,
    Trace,
    Logging,
}

impl RestrictedCategory {
    /// Every category, in Triton's order.
    pub const ALL: [RestrictedCategory; 9] = [
        RestrictedCategory::Health,
        RestrictedCategory::Metadata,
        RestrictedCategory::Inference,
        RestrictedCategory::SharedMemory,
        RestrictedCategory::ModelConfig,
        RestrictedCategory::ModelRepository,
        RestrictedCategory::Statistics,
        RestrictedCategory::Trace,
        RestrictedCategory::Logging,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RestrictedCategory::Health => "health",
            RestrictedCategory::Metadata => "metadata",
            RestrictedCategory::Inference => "inference",
            RestrictedCategory::SharedMemory => "shared-memory",
            RestrictedCategory::ModelConfig => "model-config",
            RestrictedCategory::ModelRepository => "model-repository",
            RestrictedCategory::Statistics => "statistics",
            RestrictedCategory::Trace => "trace",
            RestrictedCategory::Logging => "logging",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Category names, in entries that may each be a comma-separated list (`logging,trace`), without
/// repeats; an unknown name is an error.
pub fn categories(entries: &[String]) -> Result<Vec<RestrictedCategory>, String> {
    let mut out = Vec::new();
    for name in entries.iter().flat_map(|entry| entry.split(',')) {
        let category = RestrictedCategory::ALL
            .into_iter()
            .find(|c| c.as_str() == name.trim())
            .ok_or_else(|| format!("unknown api '{name}'"))?;
        if !out.contains(&category) {
            out.push(category);
        }
    }
    Ok(out)
}

/// The header (gRPC: metadata key) a restricted category wants, and where its value is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restriction {
    /// As configured (with the gRPC prefix where it applies); header names are matched without
    /// regard to case.
    pub header: String,
    pub key: KeySource,
}

/// Where a restricted category's key is: in the setting itself (Triton's form), or in a file
/// (`--http-restricted-api-file`), so that a mounted Secret can hold it and change it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    Value(String),
    File(String),
}

/// The restriction of each category; none restricted by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restrictions {
    by_category: [Option<Restriction>; 9],
}

/// Which option a setting belongs to: its name and wording in messages, and the key's prefix.
#[derive(Clone, Copy, Debug)]
pub enum RestrictedOption {
    /// `--http-restricted-api`: `api`s, headers as given.
    Http,
    /// `--grpc-restricted-protocol`: `protocol`s, metadata keys prefixed.
    Grpc,
}

/// Triton's prefix of a gRPC restriction's metadata key (`kRestrictedProtocolHeaderTemplate`).
pub const GRPC_HEADER_PREFIX: &str = "triton-grpc-protocol-";

impl RestrictedOption {
    pub fn flag(self) -> &'static str {
        match self {
            RestrictedOption::Http => "http-restricted-api",
            RestrictedOption::Grpc => "grpc-restricted-protocol",
        }
    }

    fn feature(self) -> &'static str {
        match self {
            RestrictedOption::Http => "api",
            RestrictedOption::Grpc => "protocol",
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            RestrictedOption::Http => "",
            RestrictedOption::Grpc => GRPC_HEADER_PREFIX,
        }
    }
}

impl Restrictions {
    /// Parses settings of one option, each `<category>[,<category>...]:<key>=<value>`, with
    /// Triton's messages for the errors Triton refuses to start with. A category may appear in
    /// one setting only. Beyond Triton, a key that cannot be a header name is refused too (no
    /// client could send it).
    pub fn parse(settings: &[String], option: RestrictedOption) -> Result<Self, String> {
        Restrictions::parse_with_files(settings, &[], option)
    }

    /// Parses `settings` as [`Restrictions::parse`] does, and `files`, each
    /// `<category>[,<category>...]:<key>=<path>`, whose key is the file's content. A category
    /// may appear in one setting of either list only.
    pub fn parse_with_files(
        settings: &[String],
        files: &[String],
        option: RestrictedOption,
    ) -> Result<Self, String> {
        let mut restrictions = Restrictions::default();
        for setting in settings {
            restrictions.add(setting, option, false)?;
        }
        for setting in files {
            restrictions.add(setting, option, true)?;
        }
        Ok(restrictions)
    }

    fn add(&mut self, setting: &str, option: RestrictedOption, file: bool) -> Result<(), String> {
        let flag = if file {
            format!("{}-file", option.flag())
        } else {
            option.flag().to_string()
        };
        let format_error = || {
            let value = if file { "path" } else { "value" };
            format!("--{flag} option format is '<config name>:<setting>=<{value}>'. Got {setting}")
        };
        let (categories, rest) = setting.split_once(':').ok_or_else(format_error)?;
        let (key, value) = rest.split_once('=').ok_or_else(format_error)?;
        if categories.is_empty() || key.is_empty() || value.is_empty() {
            return Err(format_error());
        }
        if !key.bytes().all(is_token_byte) {
            return Err(format!(
                "--{flag}: '{key}' is not a header name (letters, digits and !#$%&'*+-.^_`|~)"
            ));
        }
        for name in categories.split(',') {
            let category = RestrictedCategory::ALL
                .into_iter()
                .find(|c| c.as_str() == name)
                .ok_or_else(|| format!("unknown restricted {} '{name}'", option.feature()))?;
            let slot = &mut self.by_category[category.index()];
            if slot.is_some() {
                return Err(format!(
                    "restricted {} '{name}' can not be specified in multiple config groups",
                    option.feature()
                ));
            }
            *slot = Some(Restriction {
                header: format!("{}{key}", option.prefix()),
                key: if file {
                    KeySource::File(value.to_string())
                } else {
                    KeySource::Value(value.to_string())
                },
            });
        }
        Ok(())
    }

    pub fn get(&self, category: RestrictedCategory) -> Option<&Restriction> {
        self.by_category[category.index()].as_ref()
    }

    pub fn is_empty(&self) -> bool {
        self.by_category.iter().all(Option::is_none)
    }
}

/// A `tchar` of RFC 9110: what a header field name is made of.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests;
