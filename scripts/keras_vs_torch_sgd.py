"""Same weights, same batches, dropout off: Keras SGD vs torch SGD vs KerasSGD under warm-up.

    PYTHONPATH=. python scripts/keras_vs_torch_sgd.py 468 > docs/runs/torch/2026-12-01-edb6993/keras_equivalence.txt
"""
import os, sys
import numpy as np
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
import torch
from horovod_q8.workloads import datasets as D
from horovod_q8.workloads.models import mnist_cnn as keras_cnn
from horovod_q8.workloads import torch_train as TT

tf.keras.utils.set_random_seed(0); torch.manual_seed(0)
torch.set_num_threads(1); tf.config.threading.set_intra_op_parallelism_threads(1)
data = D.load_mnist("/usr/share/datasets/fashion-mnist")
STEPS, BS, LR0, LR1 = int(sys.argv[1]) if len(sys.argv) > 1 else 300, 64, 0.02, 0.04
x, y = data.x_train[:STEPS * BS], data.y_train[:STEPS * BS]
lrs = [LR0 + (LR1 - LR0) * (s + 1) / 468 for s in range(STEPS)]

km = keras_cnn(10)
kw = [w.numpy() for w in km.weights]
def to_torch(kw):
    c1, c1b, c2, c2b, d1, d1b, d2, d2b = kw
    d1 = d1.reshape(5, 5, 32, 128).transpose(2, 0, 1, 3).reshape(800, 128)  # (h,w,c) rows -> (c,h,w)
    return [c1.transpose(3, 2, 0, 1), c1b, c2.transpose(3, 2, 0, 1), c2b, d1.T, d1b, d2.T, d2b]

def keras_run():
    m = keras_cnn(10); m.set_weights(kw)
    opt = tf.keras.optimizers.SGD(LR0, momentum=0.9)
    lf = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as t:
            loss = lf(yb, m(xb, training=False))
        opt.apply_gradients(zip(t.gradient(loss, m.trainable_variables), m.trainable_variables))
        return loss
    out = []
    for s in range(STEPS):
        opt.learning_rate.assign(lrs[s])
        out.append(float(step(x[s * BS:(s + 1) * BS], y[s * BS:(s + 1) * BS])))
    acc = float(np.mean(np.argmax(m(data.x_test, training=False).numpy(), 1) == data.y_test))
    return np.array(out), acc

def torch_run(make_opt):
    m = TT.mnist_cnn(10)
    with torch.no_grad():
        for p, w in zip(m.parameters(), to_torch(kw)):
            p.copy_(torch.from_numpy(np.ascontiguousarray(w)))
    m.eval()
    opt = make_opt(m.parameters())
    lf = torch.nn.CrossEntropyLoss()
    xt = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    out = []
    for s in range(STEPS):
        for g in opt.param_groups: g["lr"] = lrs[s]
        opt.zero_grad()
        loss = lf(m(torch.from_numpy(xt[s * BS:(s + 1) * BS])), torch.from_numpy(y[s * BS:(s + 1) * BS]))
        loss.backward(); opt.step(); out.append(float(loss))
    with torch.no_grad():
        acc = float((m(torch.from_numpy(np.ascontiguousarray(data.x_test.transpose(0, 3, 1, 2)))).argmax(1).numpy() == data.y_test).mean())
    return np.array(out), acc

k, kacc = keras_run()
from horovod_q8.workloads.torch_sgd import KerasSGD
runs = {"torch.SGD": lambda p: torch.optim.SGD(p, lr=LR0, momentum=0.9),
        "KerasSGD": lambda p: KerasSGD(p, lr=LR0, momentum=0.9)}
print("keras test acc", kacc)
for name, mk in runs.items():
    t, tacc = torch_run(mk)
    print(name, "test acc", tacc)
    for s in [0, 1, 2, 5, 10, 20, 50, 100, 200, STEPS - 1]:
        if s < STEPS:
            print(f"  step {s:4d} keras {k[s]:.5f} {name} {t[s]:.5f} diff {t[s]-k[s]:+.2e}")
    print(f"  mean loss last 50: keras {k[-50:].mean():.4f} {name} {t[-50:].mean():.4f}")
