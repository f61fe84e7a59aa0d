// The AVX2 table's Q8 quantizers (quantize_q8.h), from quantize_q8_impl.h
// compiled with the AVX2 flags.
#define SPOOL_X86_ISA avx2
#include "kernels/x86/quantize_q8_impl.h"
