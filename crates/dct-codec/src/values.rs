/// A type decoded counts can be written as: `u32`, `i32`, `u64`, `i64`, `f32` or `f64`.
///
/// Counts are in `1 ..= 2^31 - 1`, so every integer type here holds them exactly; `f32` is exact only up to
/// `2^24` (larger counts are rounded, as in any float32 pipeline).
pub trait CountValue: Copy + Default + Send + Sync + 'static {
    /// Converts a count (`1 ..= 2^31 - 1`).
    fn from_count(count: u32) -> Self;
    /// Converts a value read directly from a uint16 stream (the hot path; kept separate so float conversions
    /// can use the cheaper small-integer instruction).
    #[inline]
    fn from_stream(value: u16) -> Self {
        Self::from_count(u32::from(value))
    }
}

macro_rules! int_count {
    ($($t:ty),*) => {$(
        impl CountValue for $t {
            #[inline]
            fn from_count(count: u32) -> Self {
                count as $t
            }
        }
    )*};
}
int_count!(u32, i32, u64, i64);

impl CountValue for f32 {
    #[inline]
    fn from_count(count: u32) -> Self {
        count as f32
    }
    #[inline]
    fn from_stream(value: u16) -> Self {
        f32::from(value)
    }
}

impl CountValue for f64 {
    #[inline]
    fn from_count(count: u32) -> Self {
        f64::from(count)
    }
    #[inline]
    fn from_stream(value: u16) -> Self {
        f64::from(value)
    }
}
