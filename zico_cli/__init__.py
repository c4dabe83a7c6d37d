"""The ``zico`` command: submit a project's command as a job, follow its output, fetch its files (docs/cli.md).

It talks to a Zico server over its REST API with a personal API token and needs no Django: ``config`` keeps
the server and token, ``api`` makes the requests and turns failures into clear messages, ``pack`` makes the
project's tar.gz (honouring ``.gitignore`` and ``.zicoignore``), ``upload`` sends it with a progress bar,
``follow`` prints a job's lines and progress until it ends, ``curve_commands`` and ``curveview`` show and attach
memory curves, ``common`` holds what several commands share, ``main`` declares the commands.
"""
