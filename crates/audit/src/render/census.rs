//! The census as a terminal table and as Markdown.

use super::Table;
use super::kernel_name::kernel_display_name;
use super::markdown::md;
use crate::census::{Census, Family, Served};
use std::fmt::Write as _;

/// The family's key in words: `aten::mm nt bf16 k=1024 n=1024`.
fn family_name(f: &Family) -> String {
    let batch = if f.batch > 1 {
        format!(" batch={}", f.batch)
    } else {
        String::new()
    };
    format!(
        "{} {} {} k={} n={}{batch}",
        f.op_name, f.layout, f.dtype, f.k, f.n
    )
}

/// What a family is flagged for, in short words.
fn flags(f: &Family) -> String {
    let mut v = Vec::new();
    if f.kernel_changes_with_m {
        v.push("kernel-changes-with-m");
    }
    if f.several_ways_at_one_m {
        v.push("several-kernels-at-one-m");
    }
    if f.split_or_reduce {
        v.push("split-k");
    }
    v.join(" ")
}

/// The ways one m was served: `kernel + reduce [grid 4x1x1]` each, every
/// kernel by its short name (JSON keeps the full names and their digests).
fn served(list: &[Served]) -> String {
    list.iter()
        .map(|s| {
            let count = if list.len() > 1 {
                format!("{}x ", s.count)
            } else {
                String::new()
            };
            let kernels: Vec<String> = s.kernels.iter().map(|k| kernel_display_name(k)).collect();
            format!(
                "{count}{} [grid {}x{}x{}]",
                kernels.join(" + "),
                s.grid[0],
                s.grid[1],
                s.grid[2]
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The first line: how much was read and how much is flagged.
fn headline(c: &Census) -> String {
    let flagged = c.flagged().count();
    let unshaped: u64 = c.unshaped.iter().map(|u| u.count).sum();
    format!(
        "census of {} sources: {} GEMMs in {} families, {flagged} flagged; {unshaped} GEMMs without shapes",
        c.sources.len(),
        c.gemms,
        c.families.len()
    )
}

/// The census as a table: per family (flagged ones, or all with `all`),
/// one row per m; then the GEMMs without shapes. `width`: the terminal's.
pub fn table(c: &Census, all: bool, width: Option<usize>) -> String {
    let mut out = headline(c);
    out.push('\n');
    let mut t = Table::new(&["FLAGS", "FAMILY", "M", "GEMMS", "SERVED BY"]);
    let mut hidden = 0;
    for f in &c.families {
        if !all && !f.flagged() {
            hidden += 1;
            continue;
        }
        for (i, r) in f.rows.iter().enumerate() {
            let (fl, name) = if i == 0 {
                (flags(f), family_name(f))
            } else {
                (String::new(), String::new())
            };
            t.row(&[
                fl,
                name,
                r.m.to_string(),
                r.count.to_string(),
                served(&r.served_by),
            ]);
        }
    }
    if !t.is_empty() {
        out.push_str(&t.render(width));
    }
    if hidden > 0 {
        let _ = writeln!(
            out,
            "{hidden} families served one way at every m (--all lists them)"
        );
    }
    if !c.unshaped.is_empty() {
        let mut u = Table::new(&["FLAGS", "OP OR REGION (NO SHAPES)", "GEMMS", "SERVED BY"]);
        for x in &c.unshaped {
            u.row(&[
                if x.split_or_reduce { "split-k" } else { "" }.to_string(),
                x.op_name.clone(),
                x.count.to_string(),
                served(&x.served_by),
            ]);
        }
        out.push_str(&u.render(width));
    }
    out
}

/// The census as Markdown: a heading line, one table of the families
/// (flagged ones, or all with `all`) and one of the GEMMs without shapes.
pub fn markdown(c: &Census, all: bool) -> String {
    let mut out = format!("### gemm-audit census\n\n{}\n\n", md(&headline(c)));
    let shown: Vec<&Family> = c.families.iter().filter(|f| all || f.flagged()).collect();
    if !shown.is_empty() {
        out.push_str(
            "| flags | family | m | GEMMs | served by |\n| --- | --- | --- | --- | --- |\n",
        );
        for f in shown {
            for (i, r) in f.rows.iter().enumerate() {
                let (fl, name) = if i == 0 {
                    (flags(f), family_name(f))
                } else {
                    (String::new(), String::new())
                };
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} |",
                    md(&fl),
                    md(&name),
                    r.m,
                    r.count,
                    md(&served(&r.served_by))
                );
            }
        }
        out.push('\n');
    }
    if !c.unshaped.is_empty() {
        out.push_str(
            "| flags | op or region (no shapes) | GEMMs | served by |\n| --- | --- | --- | --- |\n",
        );
        for x in &c.unshaped {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                if x.split_or_reduce { "split-k" } else { "" },
                md(&x.op_name),
                x.count,
                md(&served(&x.served_by))
            );
        }
    }
    out
}
