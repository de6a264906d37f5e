//! The built-in kernel families, written once: their names, split counts,
//! numeric contracts and which dtypes they serve. Each backend adds only
//! what is its own (symbol spelling, launch geometry, resources), so the
//! CPU reference and the CUDA backend cannot disagree on what a family
//! promises.

use super::MAX_SPLITS;
use crate::route::{NumericContract, ResolvedGemmRoute};
use crate::vocab::{ContractKind, OutputOwnership};
use crate::vocab::{DType, GemmOp};
use std::fmt;

/// A built-in GEMM kernel family: what a route names when it asks for a
/// kernel by name (`scalar-fma`, `split-k-fixed:4`, `wgmma-large`, ...)
/// and what a backend's symbol is a member of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelFamily {
    /// One ascending FMA chain per output, from +0.0.
    ScalarFma,
    /// Tiled and parallel, each element's chain the scalar one (so its
    /// bits are too).
    Tiled,
    /// Fixed-order split-K with this many splits: partial sums folded in
    /// split order.
    SplitKFixed(u32),
    /// The nondeterministic control: partial sums added atomically in
    /// completion order, with this many splits.
    SplitKAtomic(u32),
    /// Tensor-core `mma.sync` (bf16/f16), large tiles.
    MmaLarge,
    /// Tensor-core `mma.sync` (bf16/f16), small tiles.
    MmaSmall,
    /// Hopper TMA + `wgmma` (bf16/f16), 128x256 tiles, warp-specialised.
    /// Bit-identical to the mma families; k and n (and m for TN) must be
    /// multiples of 8.
    WgmmaLarge,
    /// The same kernel with 128x128 tiles.
    WgmmaSmall,
    /// The same kernel with 128x192 tiles: where 128x256 tiles fill the
    /// GPU's last wave badly and 128x128 ones run slower per tile (an
    /// output of 6144 columns at m = 1024: 256 tiles, two waves, against
    /// 192 in 1.5 and 384 in three).
    WgmmaMedium,
    /// The invariant ladder's decode rung (TMA + wgmma, 64x64 tiles): k
    /// cut into this many chunks ([`ladder_chunks`] of k and n), each
    /// chunk on its own block, the partials folded in chunk order by the
    /// tile's last block.
    LadderDecode(u32),
    /// The ladder's mid-m rung: the decode rung's scheme on 128x128 tiles.
    LadderMid(u32),
    /// The ladder's large-m rung (128x128 tiles): the same chunks, folded
    /// in chunk order in registers. Every rung gives the same bits.
    LadderWide(u32),
    /// The ladder's band rung (64x128 tiles, chunks folded in registers
    /// as by [`KernelFamily::LadderWide`]): twice the blocks of the wide
    /// rung at m = 65..256, where the grid-split rungs' fold is slow.
    LadderBand(u32),
    /// The ladder's narrow rung (64x32 tiles, chunks folded in registers):
    /// at decode sizes as many blocks as the decode rung puts on the grid,
    /// without its fold.
    LadderNarrow(u32),
}

/// Output columns of the ladder's decode tile: the unit [`ladder_chunks`]
/// counts n in.
pub const LADDER_TILE_N: u64 = 64;
/// The decode rung's blocks [`ladder_chunks`] aims for at m <= 64 (a
/// constant, not the device's SM count: the k order must not depend on
/// the device).
pub const LADDER_TARGET_BLOCKS: u64 = 128;
/// Most k chunks of the ladder.
pub const LADDER_MAX_CHUNKS: u64 = 4;
/// Fewest 64-wide k blocks in one ladder chunk.
pub const LADDER_MIN_CHUNK_BLOCKS: u64 = 8;

/// The ladder's k chunks for a problem family: a function of k and n
/// only, never of m or the device, so every rung and every batch size of
/// one (op, dtype, k, n) sums each output in the same order. One chunk
/// (wgmma's order, so `wgmma-large` serves large m without a fold) where
/// the narrow rung alone has [`LADDER_TARGET_BLOCKS`] tiles (n > 4064).
/// Narrower outputs are cut into more chunks so that the decode rung
/// fills the GPU: `LADDER_TARGET_BLOCKS / ceil(n / 64)`, at most
/// [`LADDER_MAX_CHUNKS`], and no more than leaves each chunk
/// [`LADDER_MIN_CHUNK_BLOCKS`] blocks of 64 k. E.g. k = 4096, n = 1024:
/// 4; n = 3072: 2; n = 4096: 1.
pub fn ladder_chunks(k: u64, n: u64) -> u32 {
    // The narrow rung's blocks walk every chunk: where its tiles of one
    // row (the tile table's) fill the target grid, k is cut no more.
    let narrow = KernelFamily::LadderNarrow(1).wgmma_tiles(1, n).unwrap_or(0);
    if narrow >= LADDER_TARGET_BLOCKS {
        return 1;
    }
    let tiles = n.div_ceil(LADDER_TILE_N).max(1);
    let by_k = (k.div_ceil(64) / LADDER_MIN_CHUNK_BLOCKS).max(1);
    (LADDER_TARGET_BLOCKS / tiles)
        .clamp(1, LADDER_MAX_CHUNKS)
        .min(by_k) as u32
}

impl KernelFamily {
    /// Every family (split counts are placeholders: 1).
    pub const ALL: [KernelFamily; 14] = [
        KernelFamily::ScalarFma,
        KernelFamily::Tiled,
        KernelFamily::SplitKFixed(1),
        KernelFamily::SplitKAtomic(1),
        KernelFamily::MmaLarge,
        KernelFamily::MmaSmall,
        KernelFamily::WgmmaLarge,
        KernelFamily::WgmmaSmall,
        KernelFamily::WgmmaMedium,
        KernelFamily::LadderDecode(1),
        KernelFamily::LadderMid(1),
        KernelFamily::LadderWide(1),
        KernelFamily::LadderBand(1),
        KernelFamily::LadderNarrow(1),
    ];

    /// The family's name without its split count (`split-k-fixed`).
    pub fn name(&self) -> &'static str {
        match self {
            KernelFamily::ScalarFma => "scalar-fma",
            KernelFamily::Tiled => "tiled",
            KernelFamily::SplitKFixed(_) => "split-k-fixed",
            KernelFamily::SplitKAtomic(_) => "split-k-atomic",
            KernelFamily::MmaLarge => "mma-large",
            KernelFamily::MmaSmall => "mma-small",
            KernelFamily::WgmmaLarge => "wgmma-large",
            KernelFamily::WgmmaSmall => "wgmma-small",
            KernelFamily::WgmmaMedium => "wgmma-medium",
            KernelFamily::LadderDecode(_) => "ladder-decode",
            KernelFamily::LadderMid(_) => "ladder-mid",
            KernelFamily::LadderWide(_) => "ladder-wide",
            KernelFamily::LadderBand(_) => "ladder-band",
            KernelFamily::LadderNarrow(_) => "ladder-narrow",
        }
    }

    /// Parses a family as [`fmt::Display`] writes it (`tiled`,
    /// `split-k-fixed:4`); `None` when `s` names no family, an error when
    /// it names one with a bad split count.
    pub fn parse(s: &str) -> Option<Result<KernelFamily, FamilyParseError>> {
        let (name, splits) = match s.split_once(':') {
            Some((name, rest)) => (name, Some(rest)),
            None => (s, None),
        };
        let family = KernelFamily::ALL.into_iter().find(|f| f.name() == name)?;
        Some(match (family.is_split(), splits) {
            (true, Some(rest)) => rest
                .parse::<u32>()
                .map_err(|_| FamilyParseError::SplitCountNotANumber(rest.to_string()))
                .and_then(|n| Ok(family.with_splits(check_splits(n)?))),
            (true, None) => Err(FamilyParseError::MissingSplitCount(family.name())),
            (false, None) => Ok(family),
            (false, Some(_)) => Err(FamilyParseError::UnexpectedSplitCount(family.name())),
        })
    }

    /// True for the split-K families, whose split count a route choice
    /// names (`split-k-fixed:4`). The ladder's chunk count is not named:
    /// it follows from the shape ([`KernelFamily::for_shape`]).
    pub fn is_split(&self) -> bool {
        matches!(
            self,
            KernelFamily::SplitKFixed(_) | KernelFamily::SplitKAtomic(_)
        )
    }

    /// The same family with `splits` splits (or ladder chunks; unchanged
    /// if it does not split).
    pub fn with_splits(self, splits: u32) -> KernelFamily {
        match self {
            KernelFamily::SplitKFixed(_) => KernelFamily::SplitKFixed(splits),
            KernelFamily::SplitKAtomic(_) => KernelFamily::SplitKAtomic(splits),
            KernelFamily::LadderDecode(_) => KernelFamily::LadderDecode(splits),
            KernelFamily::LadderMid(_) => KernelFamily::LadderMid(splits),
            KernelFamily::LadderWide(_) => KernelFamily::LadderWide(splits),
            KernelFamily::LadderBand(_) => KernelFamily::LadderBand(splits),
            KernelFamily::LadderNarrow(_) => KernelFamily::LadderNarrow(splits),
            other => other,
        }
    }

    /// The family as it serves a problem of reduction length `k` and `n`
    /// output columns: a ladder rung with [`ladder_chunks`] chunks; any
    /// other family unchanged.
    pub fn for_shape(self, k: u64, n: u64) -> KernelFamily {
        if self.is_ladder() {
            self.with_splits(ladder_chunks(k, n))
        } else {
            self
        }
    }

    /// Splits of the reduction (ladder chunks; 1 when not split).
    pub fn splits(&self) -> u32 {
        match *self {
            KernelFamily::SplitKFixed(s)
            | KernelFamily::SplitKAtomic(s)
            | KernelFamily::LadderDecode(s)
            | KernelFamily::LadderMid(s)
            | KernelFamily::LadderWide(s)
            | KernelFamily::LadderBand(s)
            | KernelFamily::LadderNarrow(s) => s,
            _ => 1,
        }
    }

    /// True for the invariant ladder's rungs.
    pub fn is_ladder(&self) -> bool {
        self.ladder_splits_on_grid() || self.ladder_folds_in_registers()
    }

    /// True for the ladder rungs that walk every k chunk in one block and
    /// fold the partials in registers (no workspace). With one chunk
    /// there is nothing to fold: the 128x128 one would be `wgmma-small`
    /// under another name, and the backend refuses it.
    pub fn ladder_folds_in_registers(&self) -> bool {
        matches!(
            self,
            KernelFamily::LadderWide(_)
                | KernelFamily::LadderBand(_)
                | KernelFamily::LadderNarrow(_)
        )
    }

    /// True for the ladder rungs that put each k chunk on its own block
    /// (and so need a workspace for the partials and per-tile counters).
    pub fn ladder_splits_on_grid(&self) -> bool {
        matches!(
            self,
            KernelFamily::LadderDecode(_) | KernelFamily::LadderMid(_)
        )
    }

    /// Rows and columns of a TMA + wgmma family's block tile (the columns
    /// are its wgmma instruction's n; 64 rows per consumer warpgroup);
    /// `None` for the other families. The kernels' instantiations in
    /// kernels/wgmma.cu agree (a test of the CUDA catalog checks it).
    pub fn wgmma_tile(&self) -> Option<(u32, u32)> {
        Some(match self {
            KernelFamily::WgmmaLarge => (128, 256),
            KernelFamily::WgmmaMedium => (128, 192),
            KernelFamily::WgmmaSmall | KernelFamily::LadderMid(_) | KernelFamily::LadderWide(_) => {
                (128, 128)
            }
            KernelFamily::LadderDecode(_) => (64, 64),
            KernelFamily::LadderBand(_) => (64, 128),
            KernelFamily::LadderNarrow(_) => (64, 32),
            _ => return None,
        })
    }

    /// k blocks of the wgmma kernels' k step one pipeline stage holds (and
    /// one barrier handshake covers): 4 for the narrow rung and 2 for the
    /// decode rung, whose stages are small enough that the handshake
    /// bounded them (the H200's fastest of 1, 2 and 4 for each), 1 for the
    /// other families. The k order is the same either way. The kernels'
    /// instantiations in kernels/wgmma.cu agree (a test of the CUDA catalog
    /// checks it).
    pub fn wgmma_k_blocks_per_stage(&self) -> u32 {
        match self {
            KernelFamily::LadderNarrow(_) => 4,
            KernelFamily::LadderDecode(_) => 2,
            _ => 1,
        }
    }

    /// Output tiles of a TMA + wgmma family on an m x n output.
    pub fn wgmma_tiles(&self, m: u64, n: u64) -> Option<u64> {
        let (bm, bn) = self.wgmma_tile()?;
        Some(m.div_ceil(bm as u64) * n.div_ceil(bn as u64))
    }

    /// Blocks a TMA + wgmma family launches on an m x n output: one per
    /// tile, times the chunks where a ladder rung puts them on the grid.
    pub fn wgmma_blocks(&self, m: u64, n: u64) -> Option<u64> {
        let tiles = self.wgmma_tiles(m, n)?;
        Some(match self.ladder_splits_on_grid() {
            true => tiles * self.splits() as u64,
            false => tiles,
        })
    }

    /// True for the persistent wgmma kernels (`wgmma-large`, `-medium`,
    /// `-small`): at most one block per SM walks the tiles, and where the
    /// last wave of tiles would leave SMs idle its tiles are cut along k
    /// into pieces summed in series through a workspace (the same k16
    /// sequence per output, so the same bits; docs/design.md).
    pub fn wgmma_persistent(&self) -> bool {
        matches!(
            self,
            KernelFamily::WgmmaLarge | KernelFamily::WgmmaSmall | KernelFamily::WgmmaMedium
        )
    }

    /// True for the TMA + wgmma families (the ladder's rungs included).
    pub fn is_wgmma(&self) -> bool {
        matches!(
            self,
            KernelFamily::WgmmaLarge | KernelFamily::WgmmaSmall | KernelFamily::WgmmaMedium
        ) || self.is_ladder()
    }

    /// True for the tensor-core families (mma.sync and wgmma).
    pub fn is_mma(&self) -> bool {
        matches!(self, KernelFamily::MmaLarge | KernelFamily::MmaSmall) || self.is_wgmma()
    }

    /// Whether the family has a kernel for `dtype` (tensor cores: halves only).
    pub fn supports(&self, dtype: DType) -> bool {
        !self.is_mma() || dtype.is_half()
    }

    /// Whether the family promises batch invariance: a fixed per-element
    /// reduction order that does not depend on m. Only the atomic control
    /// does not.
    pub fn promises_batch_invariance(&self) -> bool {
        !matches!(self, KernelFamily::SplitKAtomic(_))
    }

    /// Numeric contract and output ownership.
    pub fn contract(&self) -> (ContractKind, OutputOwnership) {
        match self {
            KernelFamily::ScalarFma => {
                (ContractKind::ScalarFma, OutputOwnership::OneOwnerPerElement)
            }
            KernelFamily::Tiled => (ContractKind::ScalarFma, OutputOwnership::OneOwnerPerTile),
            KernelFamily::SplitKFixed(_) => {
                (ContractKind::SplitKFixed, OutputOwnership::FixedSplitKFold)
            }
            KernelFamily::SplitKAtomic(_) => (
                ContractKind::AtomicUnordered,
                OutputOwnership::AtomicAccumulate,
            ),
            // The wgmma families walk k in the same ascending k16 steps
            // from +0.0 as the mma.sync ones: the same contract, checked
            // bit for bit by the audit's contract-parity rows. The ladder
            // walks each of its chunks so and folds them in chunk order
            // (its contract's split count); with one chunk it is the
            // wgmma order. Its partials are scratch: one block writes
            // each output.
            KernelFamily::MmaLarge
            | KernelFamily::MmaSmall
            | KernelFamily::WgmmaLarge
            | KernelFamily::WgmmaSmall
            | KernelFamily::WgmmaMedium
            | KernelFamily::LadderDecode(_)
            | KernelFamily::LadderMid(_)
            | KernelFamily::LadderWide(_)
            | KernelFamily::LadderBand(_)
            | KernelFamily::LadderNarrow(_) => (
                ContractKind::TensorCoreTileParity,
                OutputOwnership::OneOwnerPerTile,
            ),
        }
    }

    /// The family of `families` whose symbol (as the backend spells it,
    /// `symbol`) a stored route names, checked against what the family
    /// promises: split count in range, dtype served, contract and output
    /// ownership. What a backend adds (geometry, strides) it checks itself.
    pub fn of_route(
        families: &[KernelFamily],
        route: &ResolvedGemmRoute,
        symbol: impl Fn(KernelFamily, GemmOp, DType) -> String,
    ) -> Result<KernelFamily, RouteFamilyError> {
        let splits = check_splits(route.contract.splits)?;
        let family = families
            .iter()
            .map(|f| f.with_splits(splits))
            .find(|f| symbol(*f, route.op, route.dtype) == route.kernel_symbol)
            .ok_or_else(|| RouteFamilyError::UnknownSymbol(route.kernel_symbol.clone()))?;
        if !family.supports(route.dtype) {
            return Err(RouteFamilyError::NoDTypeKernel {
                family: family.name(),
                dtype: route.dtype,
            });
        }
        if family.contract() != (route.contract.kind.clone(), route.output_ownership) {
            return Err(RouteFamilyError::ContractMismatch {
                symbol: route.kernel_symbol.clone(),
                contract: route.contract.clone(),
                ownership: route.output_ownership,
            });
        }
        if family.splits() != splits {
            return Err(RouteFamilyError::SplitMismatch {
                family: family.name(),
                splits,
            });
        }
        Ok(family)
    }
}

/// A split count outside 1..=[`MAX_SPLITS`] (the value given).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("split count {0} is outside 1..={MAX_SPLITS}")]
pub struct SplitCountOutOfRange(pub u32);

/// Why [`KernelFamily::parse`] refused a family's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FamilyParseError {
    /// The text after `:` is not a number (the text as given).
    #[error("split count {0:?} is not a number")]
    SplitCountNotANumber(String),
    /// The split count is out of range.
    #[error(transparent)]
    SplitCount(#[from] SplitCountOutOfRange),
    /// A split-K family named without `:S` (the family's name).
    #[error("{0} needs a split count ({0}:S)")]
    MissingSplitCount(&'static str),
    /// A family that does not split named with `:S` (the family's name).
    #[error("{0} takes no split count")]
    UnexpectedSplitCount(&'static str),
}

/// Why [`KernelFamily::of_route`] found no family for a stored route.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteFamilyError {
    /// The route's split count is out of range.
    #[error(transparent)]
    SplitCount(#[from] SplitCountOutOfRange),
    /// No family of the module has the route's symbol (the symbol).
    #[error("symbol {0:?} is not a kernel of this module")]
    UnknownSymbol(String),
    /// The family has no kernel for the route's dtype.
    #[error("{family} has no {dtype} kernel")]
    NoDTypeKernel {
        /// The family's name.
        family: &'static str,
        /// The route's dtype.
        dtype: DType,
    },
    /// The symbol's family does not serve the route's contract and
    /// ownership.
    #[error("symbol {symbol:?} does not serve contract {contract} with ownership {ownership}")]
    ContractMismatch {
        /// The route's kernel symbol.
        symbol: String,
        /// The contract the route records.
        contract: NumericContract,
        /// The output ownership the route records.
        ownership: OutputOwnership,
    },
    /// The family is split another number of ways than the route records.
    #[error("{family} is not split {splits} ways")]
    SplitMismatch {
        /// The family's name.
        family: &'static str,
        /// The route's split count.
        splits: u32,
    },
}

/// `splits` when it is a split count a route may use (1..=[`MAX_SPLITS`]).
pub fn check_splits(splits: u32) -> Result<u32, SplitCountOutOfRange> {
    if splits == 0 || splits > MAX_SPLITS {
        return Err(SplitCountOutOfRange(splits));
    }
    Ok(splits)
}

impl fmt::Display for KernelFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        if self.is_split() {
            write!(f, ":{}", self.splits())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_counts_are_refused() {
        for f in KernelFamily::ALL {
            // A named split count round-trips; a ladder's follows from
            // the shape and is not written.
            let f = if f.is_split() { f.with_splits(7) } else { f };
            assert_eq!(KernelFamily::parse(&f.to_string()), Some(Ok(f)));
        }
        assert_eq!(
            KernelFamily::parse("ladder-decode:2").map(|r| r.map_err(|e| e.to_string())),
            Some(Err("ladder-decode takes no split count".into()))
        );
        assert_eq!(KernelFamily::parse("cublas"), None);
        assert_eq!(KernelFamily::parse("nosuch:3"), None);
        for bad in [
            "split-k-fixed",
            "split-k-fixed:0",
            "split-k-atomic:257",
            "split-k-fixed:x",
            "tiled:2",
        ] {
            assert!(matches!(KernelFamily::parse(bad), Some(Err(_))), "{bad}");
        }
    }

    #[test]
    fn split_count_errors_name_the_count() {
        assert_eq!(check_splits(4), Ok(4));
        let e = check_splits(300).unwrap_err();
        assert_eq!(e, SplitCountOutOfRange(300));
        assert!(e.to_string().contains("300"), "{e}");
    }

    #[test]
    fn family_parse_errors_name_the_bad_value() {
        let text = |s: &str| KernelFamily::parse(s).unwrap().unwrap_err().to_string();
        assert!(text("split-k-fixed:x4").contains("\"x4\""));
        assert!(text("split-k-atomic:999").contains("999"));
        assert!(text("split-k-fixed").contains("split-k-fixed needs a split count"));
        assert_eq!(
            KernelFamily::parse("tiled:2"),
            Some(Err(FamilyParseError::UnexpectedSplitCount("tiled")))
        );
    }

    #[test]
    fn route_family_errors_name_the_bad_value() {
        let e = RouteFamilyError::UnknownSymbol("gemm_nosuch_nn_f32".into());
        assert!(e.to_string().contains("\"gemm_nosuch_nn_f32\""), "{e}");
        let e = RouteFamilyError::NoDTypeKernel {
            family: "mma-large",
            dtype: DType::F32,
        };
        assert_eq!(e.to_string(), "mma-large has no f32 kernel");
        let e = RouteFamilyError::from(SplitCountOutOfRange(0));
        assert!(e.to_string().contains("split count 0"), "{e}");
    }

    #[test]
    fn ladder_chunks_follow_k_and_n_only() {
        // The d_model-4096 projections: the narrow rung alone fills the
        // target grid from n = 4096 on, so none is cut.
        assert_eq!(ladder_chunks(4096, 4096), 1);
        assert_eq!(ladder_chunks(14336, 4096), 1);
        assert_eq!(ladder_chunks(4096, 6144), 1);
        assert_eq!(ladder_chunks(4096, 14336), 1);
        // Narrower outputs are cut to fill the decode rung: 4064 columns
        // are 127 narrow tiles and 64 decode tiles.
        assert_eq!(ladder_chunks(4096, 4064), 2);
        assert_eq!(ladder_chunks(4096, 3072), 2);
        assert_eq!(ladder_chunks(4096, 1024), 4);
        assert_eq!(ladder_chunks(4096, 256), 4);
        // Short k keeps at least 8 blocks of 64 per chunk.
        assert_eq!(ladder_chunks(1024, 256), 2);
        assert_eq!(ladder_chunks(64, 8), 1);
        assert_eq!(ladder_chunks(0, 0), 1);
        let f = KernelFamily::LadderDecode(1).for_shape(4096, 3072);
        assert_eq!(f, KernelFamily::LadderDecode(2));
        assert_eq!(
            KernelFamily::Tiled.for_shape(4096, 4096),
            KernelFamily::Tiled
        );
        assert!(f.is_wgmma() && f.is_mma() && !f.is_split());
        assert!(f.promises_batch_invariance());
    }

    #[test]
    fn batch_invariant_rungs_by_m() {
        use super::super::{LADDER_DECODE_MAX_M as D, LADDER_MID_MAX_M as M, RouteChoice};
        use crate::vocab::GemmOp::{Nn, Tn};
        let rung = |m, k, n| RouteChoice::ladder_rung(Nn, m, k, n);
        // k = n = 4096 (one chunk); the figures are blocks, waves of 128.
        for (m, want) in [
            // narrow 128, decode 64, band 32: one wave each, most tiles.
            (1, KernelFamily::LadderNarrow(1)),
            (D, KernelFamily::LadderNarrow(1)),
            // decode 128 blocks: one wave, where narrow's 256 are two.
            (D + 1, KernelFamily::LadderDecode(1)),
            (128, KernelFamily::LadderDecode(1)),
            // decode 192 (two waves); band 64 x 1 area vs mid 32 x 2.
            (129, KernelFamily::LadderBand(1)),
            (M, KernelFamily::LadderBand(1)),
            // m = 264: large 48 blocks x area 4 vs small 96 x 2.
            (M + 8, KernelFamily::WgmmaSmall),
            (512, KernelFamily::WgmmaSmall),
            // 128 x 4 vs 256 (2 waves) x 2: a tie, to the larger tile.
            (1024, KernelFamily::WgmmaLarge),
            (8192, KernelFamily::WgmmaLarge),
        ] {
            assert_eq!(rung(m, 4096, 4096), want, "m={m}");
        }
        // TN to 63 rows with one chunk: the decode rung where it fits one
        // wave (half the narrow rung's loads of A, one k row per box row);
        // below 16 rows with several chunks the band rung, which reads A
        // the fewest times; at 64 (a full box of A) as NN.
        for (m, n, want) in [
            (1, 4096, KernelFamily::LadderDecode(1)),
            (8, 4096, KernelFamily::LadderDecode(1)),
            (8, 1024, KernelFamily::LadderBand(4)),
            (16, 4096, KernelFamily::LadderDecode(1)),
            (56, 4096, KernelFamily::LadderDecode(1)),
            (64, 4096, KernelFamily::LadderNarrow(1)),
            // QKV: decode 96 blocks, one wave.
            (32, 6144, KernelFamily::LadderDecode(1)),
            // MLP up: decode 224 blocks (two waves), band 112.
            (32, 14336, KernelFamily::LadderBand(1)),
            // Four chunks (KV): the decode rung's partials go through
            // memory; as NN.
            (16, 1024, KernelFamily::LadderNarrow(4)),
        ] {
            assert_eq!(
                RouteChoice::ladder_rung(Tn, m, 4096, n),
                want,
                "TN m={m} n={n}"
            );
        }
        // QKV at m = 1: narrow 192 (two waves), decode 96, band 48.
        assert_eq!(rung(1, 4096, 6144), KernelFamily::LadderDecode(1));
        // MLP up at m = 16: narrow 448, decode 224, band 112 (one wave).
        assert_eq!(rung(16, 4096, 14336), KernelFamily::LadderBand(1));
        // n = 1024 cuts k in 4: the decode rung's 64 blocks are 16 tiles,
        // the narrow rung's 32 blocks 32 (one wave each), to m = 256.
        for m in [8, 64, 128, M] {
            assert_eq!(rung(m, 4096, 1024), KernelFamily::LadderNarrow(4), "m={m}");
        }
        // More than one chunk above the mid rung: band or the folding wide
        // rung by weighted waves (m = 1024: 128 x 1 against 64 x 2; at
        // m = 4096 512 (4 waves) x 1 against 256 x 2, a tie).
        assert_eq!(rung(1024, 4096, 1024), KernelFamily::LadderBand(4));
        assert_eq!(rung(4096, 4096, 1024), KernelFamily::LadderWide(4));
        assert_eq!(rung(M + 8, 4096, 3072), KernelFamily::LadderBand(2));
        // The decode rung where the narrow one needs more waves (QKV
        // above); its chunks never count as tiles.
        assert_eq!(rung(8, 4096, 4064), KernelFamily::LadderNarrow(2));
        // Between the limits, the band or the 128x128 rung by waves of
        // 128 blocks weighted by area (one chunk: the mid rung).
        for (m, n, want) in [
            (72, 6144, KernelFamily::LadderBand(1)),   // 96 blocks vs 48
            (128, 6144, KernelFamily::LadderBand(1)),  // 96 vs 48
            (192, 6144, KernelFamily::LadderMid(1)),   // 144 (2 waves) vs 96
            (M, 6144, KernelFamily::LadderMid(1)),     // 192 vs 96
            (72, 14336, KernelFamily::LadderMid(1)),   // 224 vs 112
            (192, 14336, KernelFamily::LadderBand(1)), // 336 (3 waves) vs 224 (2 x 2)
            (M, 14336, KernelFamily::LadderMid(1)),    // 448 vs 224: a tie
            // Above, waves x area x (11 for 128x128 tiles, else 10): QKV
            // at m = 1024, large 192 blocks (2 waves x 4 x 10) vs medium
            // 256 (2 x 3 x 10) vs small 384 (3 x 2 x 11); at m = 2048 and
            // 4096 large and medium tie, to the larger tile.
            (1024, 6144, KernelFamily::WgmmaMedium),
            (2048, 6144, KernelFamily::WgmmaLarge),
            (4096, 6144, KernelFamily::WgmmaLarge),
            // MLP up: 448 (4 x 40) vs 600 (5 x 30) vs 896 (7 x 22).
            (1024, 14336, KernelFamily::WgmmaMedium),
            (4096, 14336, KernelFamily::WgmmaLarge),
        ] {
            assert_eq!(rung(m, 4096, n), want, "m={m} n={n}");
        }
        for f in KernelFamily::ALL.into_iter().filter(|f| f.is_ladder()) {
            assert_ne!(
                f.ladder_splits_on_grid(),
                f.ladder_folds_in_registers(),
                "{f}"
            );
        }
        assert_eq!(
            RouteChoice::parse("batch-invariant"),
            Ok(RouteChoice::BatchInvariant)
        );
        assert!(RouteChoice::BatchInvariant.promises_batch_invariance());
    }

    /// Whatever the shape, the batch-invariant route picks a rung that
    /// keeps the family's k order and that the backend and the guard
    /// accept: a ladder rung with the family's chunks (never the 128x128
    /// folding rung with one chunk), a wgmma family only where k has one
    /// chunk, and a rung whose grid fits CUDA's limits.
    #[test]
    fn batch_invariant_picks_only_servable_rungs_of_the_family_order() {
        use super::super::RouteChoice;
        use crate::vocab::GemmOp;
        let mut tried = 0;
        for op in GemmOp::ALL {
            for k in [64u64, 512, 1000, 4096, 14336, 32768] {
                for n in [8u64, 256, 1024, 2048, 3072, 4064, 4096, 6144, 14336, 32768] {
                    for m in [
                        1u64, 8, 16, 63, 64, 65, 128, 200, 256, 257, 1000, 4096, 65536,
                    ] {
                        let pick = RouteChoice::ladder_rung(*op, m, k, n);
                        let chunks = ladder_chunks(k, n);
                        let at = format!("{op} m={m} k={k} n={n}: {pick}");
                        assert!(pick.is_wgmma() && pick.promises_batch_invariance(), "{at}");
                        if pick.is_ladder() {
                            assert_eq!(pick.splits(), chunks, "{at}");
                            assert!(
                                !(matches!(pick, KernelFamily::LadderWide(_)) && chunks == 1),
                                "{at}"
                            );
                        } else {
                            assert_eq!(chunks, 1, "{at}: wgmma's order is one chunk");
                        }
                        let blocks = pick.wgmma_blocks(m, n).unwrap();
                        assert!(blocks >= 1 && blocks <= i32::MAX as u64, "{at}");
                        tried += 1;
                    }
                }
            }
        }
        assert_eq!(tried, 3 * 6 * 10 * 13);
    }

    #[test]
    fn contracts_tell_the_unsplit_families_apart() {
        // Every family but the tensor-core ones has a contract of its own,
        // so a CPU route's contract names its family.
        let simt: Vec<_> = KernelFamily::ALL.iter().filter(|f| !f.is_mma()).collect();
        for (i, a) in simt.iter().enumerate() {
            for b in &simt[i + 1..] {
                assert_ne!(a.contract(), b.contract(), "{a} {b}");
            }
        }
        assert!(!KernelFamily::SplitKAtomic(2).promises_batch_invariance());
        assert!(KernelFamily::SplitKFixed(2).promises_batch_invariance());
        assert!(!KernelFamily::MmaSmall.supports(DType::F32));
        assert!(KernelFamily::WgmmaSmall.supports(DType::F16));
    }
}
