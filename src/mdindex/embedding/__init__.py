"""Embedding: the model's files and tokenizer, token counting, the engines
that run the model (torch, the ONNX export on onnxruntime), the backend choice
measured once per machine, the embedder the sync core calls, and BM25 sparse
vectors. Importing this package imports neither torch nor numpy."""
