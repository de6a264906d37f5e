//! Timing for the benches (the `bench` feature; the binary never enables
//! it), and the visit order that keeps their samples fair.

#[cfg(all(feature = "cuda", feature = "bench"))]
pub(crate) mod timing;
pub(crate) mod visit_order;
