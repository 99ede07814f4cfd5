// Everything in data/: datasets, batch assembly, iterators, the MNIST reader and the text corpus.
#pragma once

#include "data/concat_examples.h"
#include "data/dataset.h"
#include "data/fashion_mnist_canvas.h"
#include "data/iterator.h"
#include "data/mnist.h"
#include "data/permutation.h"
#include "data/sub_dataset.h"
#include "data/text_corpus.h"
#include "data/tuple_dataset.h"
