//! Waivers: allowances checked in with a reason and an expiry date.

use super::{Allowance, UnknownAllowance};

/// An allowance checked in with its reason and an expiry date: a team
/// says once, in review, why a difference is accepted and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiver {
    /// What it lets through.
    pub allow: Allowance,
    /// Why (never empty).
    pub reason: String,
    /// The last day it applies, `YYYY-MM-DD` (UTC); none: no expiry.
    pub expires: Option<String>,
}

/// Why a waiver file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WaiverError {
    /// Not JSON of the waiver file's shape (unknown keys included).
    #[error("not a waiver file: {0}")]
    Json(#[from] serde_json::Error),
    /// Not TOML of the waiver file's shape (unknown keys included).
    #[cfg(feature = "toml")]
    #[error("not a waiver file: {0}")]
    Toml(#[from] toml::de::Error),
    /// Entry `index` (from 1) is wrong.
    #[error("waiver {index}: {problem}")]
    Entry {
        /// The entry's position in the file, from 1.
        index: usize,
        /// What is wrong with it.
        problem: EntryProblem,
    },
}

/// What is wrong with one waiver entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EntryProblem {
    /// Its `field` or `class` is no allowance.
    #[error(transparent)]
    Unknown(#[from] UnknownAllowance),
    /// Its `class` names a field, not a difference class.
    #[error("{0:?} is not a class")]
    NotAClass(String),
    /// It has both `field` and `class`, or neither.
    #[error("needs exactly one of `field` and `class`")]
    OneTarget,
    /// Its `reason` is empty.
    #[error("needs a reason")]
    NoReason,
    /// Its `expires` is no `YYYY-MM-DD` date.
    #[error("expires {0:?} is not a date YYYY-MM-DD")]
    NotADate(String),
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WaiverFile {
    waiver: Vec<WaiverEntry>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WaiverEntry {
    field: Option<String>,
    class: Option<String>,
    reason: String,
    expires: Option<String>,
}

impl Waiver {
    /// The waivers of a file's parsed contents (`[[waiver]]` entries with
    /// `field` or `class`, `reason` and optionally `expires`), or what is
    /// wrong with the first bad entry.
    fn from_file(file: WaiverFile) -> Result<Vec<Waiver>, WaiverError> {
        file.waiver
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                Waiver::from_entry(e).map_err(|problem| WaiverError::Entry {
                    index: i + 1,
                    problem,
                })
            })
            .collect()
    }

    fn from_entry(e: WaiverEntry) -> Result<Waiver, EntryProblem> {
        let allow = match (e.field, e.class) {
            (Some(f), None) => Allowance::parse(&f)?,
            (None, Some(c)) => match Allowance::parse(&c)? {
                a @ Allowance::Class(_) => a,
                Allowance::Field(_) => return Err(EntryProblem::NotAClass(c)),
            },
            _ => return Err(EntryProblem::OneTarget),
        };
        if e.reason.trim().is_empty() {
            return Err(EntryProblem::NoReason);
        }
        if let Some(d) = &e.expires
            && !is_date(d)
        {
            return Err(EntryProblem::NotADate(d.clone()));
        }
        Ok(Waiver {
            allow,
            reason: e.reason,
            expires: e.expires,
        })
    }

    /// Waivers from JSON (`{"waiver": [{"field": ..., "reason": ..., "expires": ...}]}`).
    pub fn parse_json(text: &str) -> Result<Vec<Waiver>, WaiverError> {
        Waiver::from_file(serde_json::from_str(text)?)
    }

    /// Waivers from TOML (`[[waiver]]` tables).
    #[cfg(feature = "toml")]
    pub fn parse_toml(text: &str) -> Result<Vec<Waiver>, WaiverError> {
        Waiver::from_file(toml::from_str(text)?)
    }

    /// Whether it still applies on `today` (`YYYY-MM-DD`).
    pub fn applies_on(&self, today: &str) -> bool {
        self.expires.as_deref().is_none_or(|last| today <= last)
    }
}

/// `YYYY-MM-DD` with a month 01-12 and a day 01-31.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && digits(0..4)
        && digits(5..7)
        && digits(8..10)
        && (1..=12).contains(&s[5..7].parse::<u32>().unwrap_or(0))
        && (1..=31).contains(&s[8..10].parse::<u32>().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::DiffClass;

    #[test]
    fn waivers_need_a_reason_a_date_and_one_target() {
        let ok = r#"{"waiver": [
            {"field": "device.driver", "reason": "driver 580 rollout", "expires": "2027-01-31"},
            {"class": "identity", "reason": "new cards"}
        ]}"#;
        let w = Waiver::parse_json(ok).unwrap();
        assert_eq!(w[0].allow, Allowance::Field("device.driver".into()));
        assert_eq!(w[1].allow, Allowance::Class(DiffClass::Identity));
        assert!(w[0].applies_on("2027-01-31") && !w[0].applies_on("2027-02-01"));
        assert!(w[1].applies_on("2999-12-31"));
        let ok_entry = r#"{"field": "device.driver", "reason": "r"}"#;
        for (bad, want) in [
            (
                r#"{"field": "device.driver", "reason": " "}"#,
                EntryProblem::NoReason,
            ),
            (
                r#"{"field": "device.driver", "reason": "r", "expires": "2027-13-01"}"#,
                EntryProblem::NotADate("2027-13-01".into()),
            ),
            (
                r#"{"field": "device.driver", "class": "identity", "reason": "r"}"#,
                EntryProblem::OneTarget,
            ),
            (r#"{"reason": "r"}"#, EntryProblem::OneTarget),
            (
                r#"{"field": "nosuch.field", "reason": "r"}"#,
                EntryProblem::Unknown(UnknownAllowance("nosuch.field".into())),
            ),
            (
                r#"{"class": "device.driver", "reason": "r"}"#,
                EntryProblem::NotAClass("device.driver".into()),
            ),
        ] {
            // The bad entry second: the error names its position.
            let text = format!(r#"{{"waiver": [{ok_entry}, {bad}]}}"#);
            match Waiver::parse_json(&text) {
                Err(WaiverError::Entry { index: 2, problem }) => assert_eq!(problem, want, "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        let unknown_key =
            r#"{"waiver": [{"field": "device.driver", "reason": "r", "until": "x"}]}"#;
        let e = Waiver::parse_json(unknown_key).unwrap_err();
        assert!(matches!(e, WaiverError::Json(_)), "{e:?}");
        assert!(e.to_string().contains("until"), "{e}");
    }
}
