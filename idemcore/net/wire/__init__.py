"""Kafka's wire protocol: frames through kio, and per API the translation to and from
:mod:`idemcore.net.messages` (``api.WireApi``); ``apis.APIS`` is what a server serves."""
