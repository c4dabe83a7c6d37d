"""Reports the threads and cores it was given (a test of a CPU device's share per slot), then exits."""
import json
import os

import torch

print("SHARE " + json.dumps({"torch_threads": torch.get_num_threads(), "affinity": sorted(os.sched_getaffinity(0)),
                              "omp": os.environ.get("OMP_NUM_THREADS"), "mkl": os.environ.get("MKL_NUM_THREADS")}))
