// Everything in comm/data: scattering datasets over ranks, empty datasets, and the multi-node
// and synchronized iterators, and each replica's rows of global batches.
#pragma once

#include "comm/data/empty_dataset.h"
#include "comm/data/multi_node_iterator.h"
#include "comm/data/replica_rows_iterator.h"
#include "comm/data/scatter_dataset.h"
#include "comm/data/synchronized_iterator.h"
