module @capstep attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<2x3x4xf32> loc("a"), %arg1: tensor<2x4x5xf32> loc("b"), %arg2: tensor<5xf32> loc("v")) -> (tensor<2x3x5xf32> {jax.result_info = "dot_bias"}, tensor<10xf32> {jax.result_info = "row_sums"}, tensor<3xf32> {jax.result_info = "max_02"}, tensor<3x4xf32> {jax.result_info = "iota_half"}, tensor<4xi32> {jax.result_info = "iota_i32"}, tensor<4xf32> {jax.result_info = "consts"}, tensor<2x2xf32> {jax.result_info = "special"}, tensor<2x3x4xf32> {jax.result_info = "a_plus"}, tensor<3xi32> {jax.result_info = "ints"}, tensor<3xi1> {jax.result_info = "bools"}) {
    %0 = stablehlo.dot_general %arg0, %arg1, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
    %1 = stablehlo.broadcast_in_dim %arg2, dims = [2] : (tensor<5xf32>) -> tensor<2x3x5xf32>
    %2 = stablehlo.add %0, %1 : tensor<2x3x5xf32>
    %3 = stablehlo.transpose %2, dims = [2, 0, 1] : (tensor<2x3x5xf32>) -> tensor<5x2x3xf32>
    %4 = stablehlo.reshape %3 : (tensor<5x2x3xf32>) -> tensor<10x3xf32>
    %init5 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %5 = stablehlo.reduce(%4 init: %init5) applies stablehlo.add across dimensions = [1] : (tensor<10x3xf32>, tensor<f32>) -> tensor<10xf32>
    %init6 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %6 = stablehlo.reduce(%2 init: %init6) applies stablehlo.maximum across dimensions = [0, 2] : (tensor<2x3x5xf32>, tensor<f32>) -> tensor<3xf32>
    %7 = stablehlo.iota dim = 1 : tensor<3x4xf32>
    %8 = stablehlo.iota dim = 0 : tensor<4xi32>
    %9 = stablehlo.constant dense<[1.000000e-01, -2.500000e+00, 1.401298e-45, 3.40282347e+38]> : tensor<4xf32>
    %10 = stablehlo.constant dense<[[0x7F800000, 0xFF800000], [-0.000000e+00, 0x7FC00000]]> : tensor<2x2xf32>
    %11 = stablehlo.constant dense<"0xF04F27BFA4FB8CBE18B318BF0052783D78BDF53E808AA1BCD4DC61BF94F9D13EB465C93EBC3D8E3ED87A463E00F0233B607EB03E000456BCD8E97FBE808F733D207C723E88A13E3F343A683FCA6C303F263E1E3F32CB57BFBC43593FC0D40CBE"> : tensor<2x3x4xf32>
    %12 = stablehlo.constant dense<5.000000e-01> : tensor<3x4xf32>
    %13 = stablehlo.constant dense<[-2147483648, 7, 0]> : tensor<3xi32>
    %14 = stablehlo.constant dense<[true, false, true]> : tensor<3xi1>
    %15 = stablehlo.add %arg0, %11 : tensor<2x3x4xf32>
    %16 = stablehlo.multiply %7, %12 : tensor<3x4xf32>
    return %2, %5, %6, %16, %8, %9, %10, %15, %13, %14 : tensor<2x3x5xf32>, tensor<10xf32>, tensor<3xf32>, tensor<3x4xf32>, tensor<4xi32>, tensor<4xf32>, tensor<2x2xf32>, tensor<2x3x4xf32>, tensor<3xi32>, tensor<3xi1>
  }
}
