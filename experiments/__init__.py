"""Experiments: probes that measure one design choice on a dev half, over the public pipeline
(:func:`citerag.service.pipeline.open_answerer` with an :class:`~citerag.service.answering.config.AnswerConfig`)."""
