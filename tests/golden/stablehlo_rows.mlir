module @capstep attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<6x4xf32> loc("table"), %arg1: tensor<2x3xi32> loc("idx"), %arg2: tensor<i32> loc("one"), %arg3: tensor<6xf32> loc("vec"), %arg4: tensor<5xi32> loc("ids")) -> (tensor<2x3x4xf32> {jax.result_info = "gathered"}, tensor<4xf32> {jax.result_info = "row"}, tensor<5xf32> {jax.result_info = "gathered_1d"}, tensor<6x4xf32> {jax.result_info = "scattered"}, tensor<6xf32> {jax.result_info = "scattered_1d"}) {
    %0 = "stablehlo.gather"(%arg0, %arg1) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 4>}> : (tensor<6x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
    %1 = "stablehlo.gather"(%arg0, %arg2) <{dimension_numbers = #stablehlo.gather<offset_dims = [0], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 0>, indices_are_sorted = false, slice_sizes = array<i64: 1, 4>}> : (tensor<6x4xf32>, tensor<i32>) -> tensor<4xf32>
    %2 = "stablehlo.gather"(%arg3, %arg4) <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1>}> : (tensor<6xf32>, tensor<5xi32>) -> tensor<5xf32>
    %3 = stablehlo.constant dense<0.000000e+00> : tensor<6x4xf32>
    %4 = "stablehlo.scatter"(%3, %arg1, %0) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [2], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 2>, unique_indices = false}> ({
    ^bb0(%s4_a: tensor<f32>, %s4_b: tensor<f32>):
      %s4_r = stablehlo.add %s4_a, %s4_b : tensor<f32>
      stablehlo.return %s4_r : tensor<f32>
    }) : (tensor<6x4xf32>, tensor<2x3xi32>, tensor<2x3x4xf32>) -> tensor<6x4xf32>
    %5 = "stablehlo.scatter"(%arg3, %arg4, %2) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
    ^bb0(%s5_a: tensor<f32>, %s5_b: tensor<f32>):
      %s5_r = stablehlo.add %s5_a, %s5_b : tensor<f32>
      stablehlo.return %s5_r : tensor<f32>
    }) : (tensor<6xf32>, tensor<5xi32>, tensor<5xf32>) -> tensor<6xf32>
    return %0, %1, %2, %4, %5 : tensor<2x3x4xf32>, tensor<4xf32>, tensor<5xf32>, tensor<6x4xf32>, tensor<6xf32>
  }
}
