# The tool on a slim Python image, installed as `make setup` installs it (constraints.txt, TensorFlow included).
#   docker build -t wikiprep .
#   docker run --rm wikiprep                       # the demo, end to end (make demo)
#   docker run --rm -v $PWD/data:/wikiprep/data wikiprep make wiki-128 DUMP_DATE=20261101
FROM python:3.11-slim
# gcc builds the optional C extensions (without it the same bytes are written, slower); make runs the targets.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /wikiprep
COPY . .
RUN make setup PYTHON=python
CMD ["make", "demo"]
