//! Waivers: allowances checked in with a reason and an expiry date.

use super::Allowance;

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
    fn from_file(file: WaiverFile) -> Result<Vec<Waiver>, String> {
        file.waiver
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                let at = |what: String| format!("waiver {}: {what}", i + 1);
                let allow = match (e.field, e.class) {
                    (Some(f), None) => Allowance::parse(&f).map_err(|e| at(e.to_string()))?,
                    (None, Some(c)) => match Allowance::parse(&c).map_err(|e| at(e.to_string()))? {
                        a @ Allowance::Class(_) => a,
                        Allowance::Field(_) => return Err(at(format!("{c:?} is not a class"))),
                    },
                    _ => return Err(at("needs exactly one of `field` and `class`".into())),
                };
                if e.reason.trim().is_empty() {
                    return Err(at("needs a reason".into()));
                }
                if let Some(d) = &e.expires
                    && !is_date(d)
                {
                    return Err(at(format!("expires {d:?} is not a date YYYY-MM-DD")));
                }
                Ok(Waiver {
                    allow,
                    reason: e.reason,
                    expires: e.expires,
                })
            })
            .collect()
    }

    /// Waivers from JSON (`{"waiver": [{"field": ..., "reason": ..., "expires": ...}]}`).
    pub fn parse_json(text: &str) -> Result<Vec<Waiver>, String> {
        let file: WaiverFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        Waiver::from_file(file)
    }

    /// Waivers from TOML (`[[waiver]]` tables).
    #[cfg(feature = "toml")]
    pub fn parse_toml(text: &str) -> Result<Vec<Waiver>, String> {
        let file: WaiverFile = toml::from_str(text).map_err(|e| e.to_string())?;
        Waiver::from_file(file)
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
        for bad in [
            r#"{"waiver": [{"field": "device.driver", "reason": " "}]}"#,
            r#"{"waiver": [{"field": "device.driver", "reason": "r", "expires": "2027-13-01"}]}"#,
            r#"{"waiver": [{"field": "device.driver", "class": "identity", "reason": "r"}]}"#,
            r#"{"waiver": [{"reason": "r"}]}"#,
            r#"{"waiver": [{"field": "nosuch.field", "reason": "r"}]}"#,
            r#"{"waiver": [{"class": "device.driver", "reason": "r"}]}"#,
            r#"{"waiver": [{"field": "device.driver", "reason": "r", "until": "x"}]}"#,
        ] {
            assert!(Waiver::parse_json(bad).is_err(), "{bad}");
        }
    }
}
