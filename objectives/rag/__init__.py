"""Helpers of the ``rag`` target: the chunk store it retrieves from and the pipeline it drives."""
