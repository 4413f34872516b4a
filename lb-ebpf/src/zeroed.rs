//! Zeroed values without `memset`.

use core::mem::{MaybeUninit, align_of, size_of};
use core::ptr::write_volatile;

/// Zeroes `slot` a word at a time with volatile stores and lends it out in place. LLVM turns
/// plain zeroing of more than a few bytes into a call to `memset`, a loop the verifier
/// walks byte by byte on every path through the program (the 64-byte FIB query alone took
/// a tenth of its budget of 1,000,000 instructions); and a zeroed value moved anywhere
/// would be copied with a `memset` again, so it stays where it was zeroed.
#[inline(always)]
pub fn zeroed<T>(slot: &mut MaybeUninit<T>) -> &mut T {
    const {
        assert!(size_of::<T>() % 4 == 0 && align_of::<T>() >= 4);
    }
    let words = slot.as_mut_ptr() as *mut u32;
    let mut i = 0;
    while i < size_of::<T>() / 4 {
        // SAFETY: `i` words fit in `T` (its size is a multiple of 4, its alignment at least 4).
        unsafe { write_volatile(words.add(i), 0) };
        i += 1;
    }
    // SAFETY: every byte is written; the types this is used for are plain data, valid when
    // zero.
    unsafe { slot.assume_init_mut() }
}
