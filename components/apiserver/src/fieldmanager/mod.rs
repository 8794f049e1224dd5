//! Server-side apply and managedFields, good enough for `kubectl apply --server-side` on the common
//! kinds (not the whole structured-merge-diff): every write records which manager set which fields;
//! an apply merges its configuration, conflicts with other managers' differing values unless forced,
//! and removes the fields its previous configuration set and this one does not (unless another
//! manager owns them). Pure functions over JSON; the handlers do the I/O.

pub mod entries;
pub mod fieldset;
pub mod merge;

use serde_json::{Map, Value};

use entries::{Entry, Operation};
use fieldset::{field_set, is_item, path_string, value_at, FieldSet, Path};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FieldManagerError {
    #[error("{0}")]
    Invalid(String),
    #[error("{}", conflict_message(.0))]
    Conflicts(Vec<Conflict>),
}

/// A field another manager owns with a different value than the configuration sets.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    /// The manager as upstream prints it (`"kubectl"`, `"x" using apps/v1`).
    pub manager: String,
    pub path: Path,
}

impl Conflict {
    pub fn field(&self) -> String {
        path_string(&self.path)
    }
}

/// Upstream's wording (`Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas`).
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [one] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            one.manager,
            one.field()
        );
    }
    let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
    managers.sort();
    managers.dedup();
    let mut lines = Vec::new();
    for m in managers {
        lines.push(format!("conflicts with {m}:"));
        for c in conflicts.iter().filter(|c| c.manager == m) {
            lines.push(format!("- {}", c.field()));
        }
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// Metadata the server owns: never part of a field set.
const SERVER_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// The part of an object fields are tracked for: no apiVersion/kind, no server-owned metadata,
/// and status only where `status` says (the status subresource, or kinds without one).
fn trackable(obj: &Value, status: bool) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
        if !status {
            m.remove("status");
        }
        if let Some(Value::Object(meta)) = m.get_mut("metadata") {
            for f in SERVER_META {
                meta.remove(*f);
            }
            if meta.is_empty() {
                m.remove("metadata");
            }
        }
    }
    v
}

/// Who writes, and where.
#[derive(Debug, Clone)]
pub struct Writer<'a> {
    pub manager: &'a str,
    pub api_version: &'a str,
    /// `Some("status")` for writes through the status subresource.
    pub subresource: Option<&'a str>,
    /// Whether status fields count (the kind has no status subresource, or this is one).
    pub tracks_status: bool,
    pub now: &'a str,
}

/// The object an apply makes: `live` (None = create) with `applied` merged in, fields the
/// manager's previous apply set and this one does not removed, and the managedFields updated.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    w: &Writer<'_>,
    force: bool,
) -> Result<Value, FieldManagerError> {
    let Some(cfg) = applied.as_object() else {
        return Err(FieldManagerError::Invalid(
            "an apply configuration must be an object".into(),
        ));
    };
    for f in ["apiVersion", "kind"] {
        if cfg.get(f).and_then(Value::as_str).unwrap_or("").is_empty() {
            return Err(FieldManagerError::Invalid(format!(
                "invalid object type: {f} must be set in an apply configuration"
            )));
        }
    }
    if applied["metadata"]
        .get("managedFields")
        .is_some_and(|m| !m.is_null())
    {
        return Err(FieldManagerError::Invalid(
            "metadata.managedFields must be nil".into(),
        ));
    }
    let mut config = applied.clone();
    if !w.tracks_status && w.subresource.is_none() {
        // Status of such kinds is not written through the main resource, so not applied either.
        if let Some(m) = config.as_object_mut() {
            m.remove("status");
        }
    }
    let applied_set = field_set(&trackable(&config, w.tracks_status));
    let base = live.cloned().unwrap_or_else(|| Value::Object(Map::new()));
    let mut entries = entries::read(&base);
    let me = |e: &Entry| e.is(w.manager, Operation::Apply, w.subresource);

    let mut conflicts = Vec::new();
    for e in entries.iter().filter(|e| !me(e)) {
        for p in e.fields.intersection(&applied_set) {
            if is_item(p) {
                continue;
            }
            let want = value_at(&config, p);
            if want.is_some_and(|v| v.as_object().is_some_and(Map::is_empty)) {
                continue; // `{}` merges into whatever is there: nothing to conflict with
            }
            if want != value_at(&base, p) {
                conflicts.push(Conflict {
                    manager: e.describe(),
                    path: p.clone(),
                });
            }
        }
    }
    if !conflicts.is_empty() {
        if !force && !upgrades_client_side_apply(&base, w.manager, &conflicts, w.tracks_status) {
            return Err(FieldManagerError::Conflicts(conflicts));
        }
        let taken: FieldSet = conflicts.iter().map(|c| c.path.clone()).collect();
        for e in entries.iter_mut().filter(|e| !me(e)) {
            e.fields = e.fields.difference(&taken).cloned().collect();
        }
    }

    let previous = entries
        .iter()
        .find(|e| me(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let others: FieldSet = entries
        .iter()
        .filter(|e| !me(e))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    let given_up: FieldSet = previous
        .difference(&applied_set)
        .filter(|p| !others.contains(*p))
        .cloned()
        .collect();
    let keep: FieldSet = others.union(&applied_set).cloned().collect();

    let mut out = base;
    merge::remove_paths(&mut out, &given_up, &keep);
    merge::merge_applied(&mut out, &config);

    entries.retain(|e| !me(e));
    entries.push(Entry {
        manager: w.manager.to_string(),
        operation: Operation::Apply,
        subresource: w.subresource.map(str::to_string),
        api_version: w.api_version.to_string(),
        time: Some(w.now.to_string()),
        fields: applied_set,
    });
    entries::write(&mut out, entries);
    Ok(out)
}

/// The manager `kubectl apply --server-side` uses by default.
const KUBECTL_MANAGER: &str = "kubectl";
/// Client-side apply's record of the configuration it last applied.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Upstream lets `kubectl` take over from client-side apply: conflicts only on fields that the
/// object's last-applied-configuration sets are forced (kubectl then migrates the managedFields).
fn upgrades_client_side_apply(
    live: &Value,
    manager: &str,
    conflicts: &[Conflict],
    tracks_status: bool,
) -> bool {
    if manager != KUBECTL_MANAGER {
        return false;
    }
    let Some(last) = live["metadata"]["annotations"][LAST_APPLIED]
        .as_str()
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
    else {
        return false;
    };
    let allowed = field_set(&trackable(&last, tracks_status));
    conflicts.iter().all(|c| allowed.contains(&c.path))
}

/// Records a non-apply write (create, update, patch) by `w.manager` on `new`: it takes the fields
/// it changed from every other manager. managedFields sent with the request replace the stored
/// ones (an empty list clears them); omitted, the stored ones carry over.
pub fn track_update(old: Option<&Value>, new: &mut Value, w: &Writer<'_>) {
    let empty = Value::Object(Map::new());
    let old = old.unwrap_or(&empty);
    let sent = new["metadata"].get("managedFields").cloned();
    let stored = old["metadata"].get("managedFields").cloned();
    let mut entries = match &sent {
        Some(Value::Array(a)) if a.is_empty() => {
            if let Some(m) = new["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
            return;
        }
        Some(s) if !s.is_null() && Some(s) != stored.as_ref() => entries::read(new),
        _ => entries::read(old),
    };
    let before = trackable(old, w.tracks_status);
    let after = trackable(new, w.tracks_status);
    let old_set = field_set(&before);
    let new_set = field_set(&after);
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| {
            !old_set.contains(*p) || (!is_item(p) && value_at(&before, p) != value_at(&after, p))
        })
        .cloned()
        .collect();
    let removed: FieldSet = old_set.difference(&new_set).cloned().collect();
    if !changed.is_empty() || !removed.is_empty() {
        let mine = |e: &Entry| e.is(w.manager, Operation::Update, w.subresource);
        for e in entries.iter_mut() {
            let kept = e
                .fields
                .iter()
                .filter(|p| !changed.contains(*p) && !removed.contains(*p));
            e.fields = kept.cloned().collect();
        }
        match entries.iter_mut().find(|e| mine(e)) {
            Some(e) => {
                e.fields.extend(changed);
                e.time = Some(w.now.to_string());
                e.api_version = w.api_version.to_string();
            }
            None => entries.push(Entry {
                manager: w.manager.to_string(),
                operation: Operation::Update,
                subresource: w.subresource.map(str::to_string),
                api_version: w.api_version.to_string(),
                time: Some(w.now.to_string()),
                fields: changed,
            }),
        }
    }
    entries::write(new, entries);
}

/// The manager a request without `fieldManager` is recorded as: its User-Agent's program name
/// (`kubectl/v1.32.0 (linux/amd64) ...` → `kubectl`), as upstream.
pub fn manager_from_user_agent(user_agent: Option<&str>) -> String {
    let ua = user_agent.unwrap_or("").trim();
    let name = ua.split('/').next().unwrap_or("").trim();
    if name.is_empty() {
        "unknown".into()
    } else {
        name.chars().take(128).collect()
    }
}

#[cfg(test)]
mod tests;
