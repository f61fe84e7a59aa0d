// The AVX-512 table's Q8 quantizers (quantize_q8.h), from quantize_q8_impl.h
// compiled with the AVX-512 flags.
#define SPOOL_X86_ISA avx512
#include "kernels/x86/quantize_q8_impl.h"
