//! The detail of a diff as text groups: a change many routes share is one
//! group naming how many, a module's or pin's fields are one group.

use super::{DiffClass, Difference, TraceDiff};
use std::collections::HashMap;
use std::hash::Hash;

/// GEMM names listed in a group's header before "and N more".
const SHOWN: usize = 3;

/// `items` grouped by `key`, groups and members in the order first seen;
/// linear in the items (a diff can hold a difference per pin or route).
pub(super) fn ordered_groups<T: Copy, K: Hash + Eq + Clone>(
    items: impl IntoIterator<Item = T>,
    key: impl Fn(T) -> K,
) -> Vec<(K, Vec<T>)> {
    let mut index: HashMap<K, usize> = HashMap::new();
    let mut out: Vec<(K, Vec<T>)> = Vec::new();
    for item in items {
        let k = key(item);
        match index.get(&k) {
            Some(&i) => out[i].1.push(item),
            None => {
                index.insert(k.clone(), out.len());
                out.push((k, vec![item]));
            }
        }
    }
    out
}

fn line(d: &Difference) -> String {
    format!(
        "{}: {} -> {}",
        d.change.field, d.change.expected, d.change.found
    )
}

/// `context.module[KEY]` or `context.pin[FAMILY]` for their fields, else
/// the field itself.
pub(super) fn owner(field: &str) -> &str {
    ["context.module[", "context.pin["]
        .iter()
        .find(|p| field.starts_with(*p))
        .and_then(|_| field.find(']').map(|i| &field[..=i]))
        .unwrap_or(field)
}

/// `route 3 (qkv@b8)` for one route; `12 routes (a, b, c and 9 more)`.
fn routes_label(ds: &[&Difference]) -> String {
    match ds {
        [d] => d.location(),
        many => {
            let names: Vec<&str> = many
                .iter()
                .take(SHOWN)
                .map(|d| d.gemm.as_deref().unwrap_or("trace"))
                .collect();
            let more = match many.len() - names.len() {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            format!("{} routes ({}{more})", many.len(), names.join(", "))
        }
    }
}

/// One group: a single change on one line, several under a header.
fn group(class: DiffClass, at: &str, lines: Vec<String>) -> String {
    match lines.as_slice() {
        [one] => format!("[{class}] {at}: {one}\n"),
        _ => {
            let mut g = format!("[{class}] {at}:\n");
            for l in lines {
                g.push_str(&format!("    {l}\n"));
            }
            g
        }
    }
}

impl TraceDiff {
    /// The differences as text groups, in the order first found: the
    /// trace's own fields (a module's or pin's fields together), then the
    /// routes', one group per class and set of routes sharing the same
    /// changes.
    pub(super) fn groups(&self) -> Vec<String> {
        let (trace, routes): (Vec<&Difference>, Vec<&Difference>) =
            self.differences.iter().partition(|d| d.gemm.is_none());
        let mut out = Vec::new();
        for ((class, owner), ds) in ordered_groups(trace, |d| (d.class, owner(&d.change.field))) {
            let lines = match ds.as_slice() {
                [d] => vec![line(d)],
                _ => ds
                    .iter()
                    .map(|d| {
                        let rest = d.change.field.strip_prefix(owner).unwrap_or("");
                        let d = Difference {
                            change: crate::digest::FieldChange {
                                field: rest.trim_start_matches('.').to_string(),
                                ..d.change.clone()
                            },
                            ..(*d).clone()
                        };
                        line(&d)
                    })
                    .collect(),
            };
            let at = if lines.len() == 1 {
                "trace".to_string()
            } else {
                format!("trace: {owner}")
            };
            out.push(group(class, &at, lines));
        }
        // Each distinct change with the routes it reaches; then the changes
        // reaching the same routes, one group.
        let changes = ordered_groups(routes, |d| {
            (
                d.class,
                &d.change.field,
                &d.change.expected,
                &d.change.found,
            )
        });
        let by_routes = ordered_groups(changes.iter().map(|(_, ds)| ds), |ds| {
            let routes: Vec<String> = ds.iter().map(|d| d.location()).collect();
            (ds[0].class, routes)
        });
        for ((class, _), groups) in by_routes {
            let lines = groups.iter().map(|ds| line(ds[0])).collect();
            out.push(group(class, &routes_label(groups[0]), lines));
        }
        out
    }
}
