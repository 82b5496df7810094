"""Compile the shipped LSTM example with relay_aot, run it, and print the result next to the
Relay interpreter's.

    python examples/run_example.py [path/to/program.relay]
"""

import sys
import time
from pathlib import Path

import numpy as np
import tvm
from tvm import relay

import relay_aot
from relay_aot import testing


def main(path: str) -> int:
    mod = tvm.relay.parse(Path(path).read_text(), source_name=path)
    rng = np.random.default_rng(0)
    args = [
        rng.uniform(-1, 1, size=[int(d) for d in p.checked_type.shape]).astype("float32")
        for p in relay.transform.InferType()(mod)["main"].params
    ]

    start = time.perf_counter()
    compiled = relay_aot.compile(mod)
    print(f"compiled {path} in {time.perf_counter() - start:.2f} s -> {compiled.library_path}")
    ours = compiled(*args)
    reference = testing.run_reference(mod, args, "interpreter")

    np.set_printoptions(precision=4, suppress=True, linewidth=100)
    for i, (a, b) in enumerate(zip(ours, reference)):
        print(f"result[{i}] relay_aot:   {a.numpy().ravel()}")
        print(f"result[{i}] interpreter: {b.numpy().ravel()}")
    testing.assert_same(
        testing.normalize(ours), testing.normalize(reference), rtol=1e-4, atol=1e-5, names=("relay_aot", "interpreter")
    )
    print("relay_aot and the Relay interpreter agree.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).with_name("lstm.relay"))))
