"""Synthetic checkpoints for `accio bench safetensors` on the host: 64 F16 tensors (NumPy's own type,
so safetensors.numpy can load them) of random bytes, written by safetensors.numpy.save_file."""
import sys
import numpy as np
import safetensors.numpy as sn

def make(path, nbytes, tensors, seed, prefix=""):
    rng = np.random.default_rng(seed)
    per = nbytes // tensors // 2
    sn.save_file({f"{prefix}layer.{i:03d}.weight": rng.integers(0, 1 << 16, (per // 1024, 1024), dtype=np.uint16).view(np.float16)
                  for i in range(tensors)}, path, metadata={"format": "np"})

if __name__ == "__main__":
    out, size, tensors = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    shards = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    if not shards:
        make(out, size, tensors, 1)
    else:
        import json, os
        wm = {}
        for k in range(shards):
            fn = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
            make(os.path.join(out, fn), size, tensors, 10 + k, f"shard{k}.")
            import accio.safetensors as st
            with st.safe_open(os.path.join(out, fn)) as f:
                wm.update({n: fn for n in f.keys()})
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": wm}, f)
