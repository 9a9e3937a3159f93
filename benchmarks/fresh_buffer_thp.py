"""Why accio's reads into a freshly allocated NumPy array spread so widely (issue 23): NumPy asks
for transparent huge pages (madvise MADV_HUGEPAGE) on large allocations. Reads a hot 1 GiB file
(/var/tmp/st_bimodal.bin, made beforehand) into a fresh np.empty buffer with NumPy's huge-page
advice on and off, interleaved, 9 rounds each, and prints GB/s per sample.
Usage: python benchmarks/fresh_buffer_thp.py   (the file: 1 GiB of random bytes at the path above)
"""
import time, numpy as np, accio, sys
try:
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:
    from numpy.core.multiarray import _set_madvise_hugepage
p='/var/tmp/st_bimodal.bin'; n=1<<30
res={True:[],False:[]}
with accio.open(p,'r') as f:
    for r in range(9):
        for hp in (True,False):
            _set_madvise_hugepage(hp)
            t=time.perf_counter(); b=np.empty(n,np.uint8); f.read_into(b,0); dt=time.perf_counter()-t
            res[hp].append(n/dt/1e9); del b
for hp in res: print('hugepage',hp, ' '.join(f'{x:.2f}' for x in res[hp]), 'median', sorted(res[hp])[len(res[hp])//2])
