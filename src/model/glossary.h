// Dimension letters used in every shape comment of the model (and the backend):
//   B  micro-batch size          T  sequence length          N  tokens = B * T
//   C  model width (d_model)     L  layers                   V  vocabulary size
//   NH attention heads           KV key/value heads          HD head dim
//   QKV = (NH + 2 * KV) * HD     F  SwiGLU hidden width
// Accumulation rule: parameter gradients +=, activation gradients =, the residual stream and
// its gradient +=. Two micro-steps therefore equal one double step (tested).
#pragma once
