"""The inbound side: list and watch the API server. ``informer`` keeps a store per kind (list,
then watch from the list's resourceVersion, relist on 410); what an object means to the
scheduler is ``translate``'s, handed to the informer as its decode function. A new kind is one
more ``Informer`` in ``main``, its reader in ``translate``.
"""
