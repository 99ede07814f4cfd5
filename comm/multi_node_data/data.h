// Everything in comm/multi_node_data: scattering datasets over ranks, empty datasets, and the multi-node
// and synchronized iterators, and each replica's rows of global batches.
#pragma once

#include "comm/multi_node_data/empty_dataset.h"
#include "comm/multi_node_data/multi_node_iterator.h"
#include "comm/multi_node_data/replica_rows_iterator.h"
#include "comm/multi_node_data/scatter_dataset.h"
#include "comm/multi_node_data/synchronized_iterator.h"
