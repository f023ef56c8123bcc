module @capstep attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 2 : i32} {
  func.func public @main(%arg0: tensor<2x3xf32> loc("x")) -> (tensor<2x3xf32> {jax.result_info = "y"}, tensor<2x3xf32> {jax.result_info = "z"}) {
    %0 = stablehlo.constant dense<2.000000e+00> : tensor<2x3xf32>
    %1 = stablehlo.multiply %arg0, %0 : tensor<2x3xf32>
    %2, %3 = "stablehlo.all_reduce"(%1, %arg0) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
    ^bb0(%r2_a: tensor<f32>, %r2_b: tensor<f32>):
      %r2_r = stablehlo.add %r2_a, %r2_b : tensor<f32>
      stablehlo.return %r2_r : tensor<f32>
    }) : (tensor<2x3xf32>, tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>)
    %4 = stablehlo.add %3, %2 : tensor<2x3xf32>
    return %2, %4 : tensor<2x3xf32>, tensor<2x3xf32>
  }
}
